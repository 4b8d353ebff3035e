"""Building and serving the gateway process: engine from settings, uvicorn with uvloop."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import uvicorn

from gateway.call.event_log import EventLog
from gateway.config import GatewaySettings
from gateway.engines.engine import Engine
from gateway.heap import settle_heap
from schemas.pipeline_file import Domain


def model_dir(settings: GatewaySettings, home: Path) -> Path:
    """The policy the engine starts from; the tiny local one is built on first use."""
    directory = settings.model_dir or home / "policies" / "base"
    if not (directory / "config.json").exists():
        from infra.tiny_model import save_tiny_policy

        save_tiny_policy(directory)
    return directory


def build_engine(settings: GatewaySettings, home: Path) -> Engine:
    """One engine, or a fleet (routed by cache affinity, then load) when there are several."""
    directory = model_dir(settings, home)
    engines: list[Engine]
    if settings.engine == "vllm":
        from gateway.engines.chat_tokenizer import ChatTokenizer
        from gateway.engines.vllm_engine import VllmEngine

        tokenizer = ChatTokenizer(directory)
        engines = [
            VllmEngine(url, tokenizer, model_name=settings.served_model_name, base_dir=directory)
            for url in settings.vllm_urls or [settings.vllm_url]
        ]
    else:
        from gateway.engines.embedded_engine import EmbeddedEngine

        engines = [
            EmbeddedEngine(
                directory,
                max_batch_size=settings.max_batch_size,
                batch_wait_ms=settings.batch_wait_ms,
                max_context=settings.max_context_tokens,
            )
            for _ in range(settings.engines)
        ]
    if len(engines) == 1:
        return engines[0]
    from gateway.engines.engine_fleet import EngineFleet

    return EngineFleet(
        engines,
        max_inflight_per_engine=settings.max_inflight_per_engine,
        backoff_s=settings.engine_backoff_s,
    )


def serve(
    settings: GatewaySettings,
    bootstrap: str,
    home: Path,
    domains: Mapping[str, Domain],
    engine: Engine | None = None,
) -> None:
    from gateway.app import create_app

    events = EventLog(
        bootstrap, settings.events_topic, settings.queue_topic, timeout_s=settings.produce_timeout_s
    )
    app = create_app(
        settings,
        engine or build_engine(settings, home),
        events,
        bootstrap=bootstrap,
        on_started=settle_heap,
        domains=domains,
    )
    uvicorn.run(app, **uvicorn_options(settings))


def uvicorn_options(settings: GatewaySettings) -> dict[str, Any]:
    return {
        "host": settings.host,
        "port": settings.port,
        "loop": "uvloop",
        "http": "httptools",
        "timeout_keep_alive": settings.keep_alive_s,
        # no client address is read: the layer would only cost a call's CPU
        "proxy_headers": False,
        "log_level": "warning",
        "access_log": False,
    }
