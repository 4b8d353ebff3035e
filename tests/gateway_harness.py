"""A real gateway (uvicorn in a thread, embedded tiny engine, real Kafka) for tests."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from gateway.app import create_app
from gateway.call.event_log import EventLog
from gateway.config import GatewaySettings
from gateway.engines.embedded_engine import EmbeddedEngine
from gateway.engines.engine import Engine
from infra.kafka_clients import ensure_topics
from infra.local_broker import free_port
from infra.log_reader import LogRange, read_log
from schemas.records import Envelope
from schemas.topics import EVENTS, POLICY, QUEUE, TopicSpec

ADMIN_KEY = "test-admin-key-0123456789"


@dataclass
class RunningGateway:
    url: str
    settings: GatewaySettings
    engine: EmbeddedEngine
    events: TopicSpec
    queue: TopicSpec
    policy: TopicSpec
    bootstrap: str

    def admin(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=60
        )

    def new_rollout(self, **body: Any) -> dict[str, Any]:
        with self.admin() as client:
            response = client.post("/rollouts", json={"task_id": "t", **body})
        assert response.status_code == 200, response.text
        return response.json()

    def events_of(self, rollout_id: str) -> list[Envelope]:
        out = []
        for d in read_log(self.bootstrap, self.events, LogRange()):
            if isinstance(d.record, Envelope) and d.record.rollout_id == rollout_id:
                out.append(d.record)
        return out


@contextmanager
def running_gateway(
    bootstrap: str,
    model_dir: Path,
    engine_for: Callable[[GatewaySettings], Engine] | None = None,
    **overrides: Any,
) -> Iterator[RunningGateway]:
    """A real gateway on private topics; the tiny embedded engine unless ``engine_for`` builds
    another from the settings."""
    suffix = uuid.uuid4().hex[:8]
    specs = [
        TopicSpec(f"test.{spec.name}.{suffix}", spec.record, spec.partitions, spec.configs)
        for spec in (EVENTS, QUEUE, POLICY)
    ]
    ensure_topics(bootstrap, tuple(specs), timeout_s=30)
    port = free_port()
    settings = GatewaySettings(
        admin_key=ADMIN_KEY,
        port=port,
        model_dir=model_dir,
        events_topic=specs[0].name,
        queue_topic=specs[1].name,
        policy_topic=specs[2].name,
        **overrides,
    )
    engine = (
        engine_for(settings)
        if engine_for is not None
        else EmbeddedEngine(
            model_dir, max_batch_size=8, batch_wait_ms=2, max_context=settings.max_context_tokens
        )
    )
    events = EventLog(bootstrap, specs[0].name, specs[1].name, timeout_s=settings.produce_timeout_s)
    app = create_app(settings, engine, events, bootstrap=bootstrap)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive(), "gateway failed to start"
        assert time.monotonic() < deadline, "gateway did not start"
        time.sleep(0.05)
    try:
        yield RunningGateway(f"http://127.0.0.1:{port}", settings, engine, *specs, bootstrap)
    finally:
        server.should_exit = True
        thread.join(30)
        assert not thread.is_alive(), "the gateway did not shut down within 30 s"
