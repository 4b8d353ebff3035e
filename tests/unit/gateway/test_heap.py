"""The gateway process's garbage-collector settings: applied by its own entry point once
start-up is done, never to a process that only builds the app (this test run)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys

import httpx

from gateway.app import create_app
from gateway.config import GatewaySettings
from gateway.engines.chat_tokenizer import ChatTokenizer
from gateway.heap import YOUNG_COLLECTION_EVERY
from tests.memory_event_log import MemoryEventLog
from tests.unit.gateway.conftest import ADMIN, ADMIN_KEY
from tests.unit.gateway.test_engine_fleet import FakeEngine

PROBE = """
import gc, json
import gateway.app  # the start-up heap: what a gateway process has imported
before = gc.get_threshold()
from gateway.heap import settle_heap
settle_heap()
print(json.dumps({"before": before, "after": gc.get_threshold(), "frozen": gc.get_freeze_count()}))
"""


def test_settling_freezes_the_start_up_heap_and_collects_the_young_less_often():
    run = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    probe = json.loads(run.stdout)
    assert probe["after"] == [YOUNG_COLLECTION_EVERY, *probe["before"][1:]]
    assert probe["before"][0] < YOUNG_COLLECTION_EVERY
    assert probe["frozen"] > 10_000  # the imported modules, out of every later collection


def _engine(model_dir) -> FakeEngine:
    """A fake engine with the tiny policy's tokenizer, which the app renders with."""
    engine = FakeEngine()
    engine.tokenizer = ChatTokenizer(model_dir)
    return engine


async def test_on_started_runs_once_after_start_up_and_only_the_entry_point_settles_the_heap(
    tiny_policy,
):
    collector = (gc.get_threshold(), gc.get_freeze_count())
    engine, seen = _engine(tiny_policy), []
    settings = GatewaySettings(admin_key=ADMIN_KEY, port=8000, follow_policy=False)
    app = create_app(
        settings, engine, MemoryEventLog(), on_started=lambda: seen.append(engine.started)
    )
    assert seen == []
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http,
    ):
        assert seen == [True]
        created = await http.post("/rollouts", json={"task_id": "t"}, headers=ADMIN)
        assert created.status_code == 200
    assert seen == [True]
    plain = create_app(settings, _engine(tiny_policy), MemoryEventLog())
    async with plain.router.lifespan_context(plain):
        pass
    assert (gc.get_threshold(), gc.get_freeze_count()) == collector
