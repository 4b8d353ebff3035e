"""The engine fleet: affinity and spill on real awaits, failures routed around (retried once,
else 502/503), and every call tagged with the version of the engine that served it."""

from __future__ import annotations

import asyncio
from typing import cast

import httpx
import numpy as np
import pytest

from gateway.app import create_app
from gateway.config import GatewaySettings
from gateway.engines.chat_tokenizer import ChatTokenizer
from gateway.engines.embedded_engine import EmbeddedEngine
from gateway.engines.engine import Engine, Generation, SamplingParams
from gateway.engines.engine_fleet import NO_ENGINE, EngineFleet, routing_affinity
from gateway.errors import EngineError, EngineUnavailableError
from tests.memory_event_log import MemoryEventLog
from tests.unit.gateway.conftest import ADMIN, ADMIN_KEY

PARAMS = SamplingParams(max_tokens=4)


class FakeEngine:
    """Answers at once (or when ``gate`` opens), tagged with its version; fails on demand."""

    def __init__(self, version: int = 0) -> None:
        self.tokenizer = cast(ChatTokenizer, object())
        self.version = version
        self.available = True
        self.served = 0
        self.fail_with: BaseException | None = None
        self.refuse_load = False
        self.gate: asyncio.Event | None = None
        self.started = self.closed = False

    @property
    def policy_version(self) -> int:
        return self.version

    async def start(self) -> None:
        self.started = True

    async def close(self) -> None:
        self.closed = True

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> list[Generation]:
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_with is not None:
            raise self.fail_with
        self.served += 1
        one = np.zeros(1, dtype=np.int32)
        return [Generation(one, one.astype(np.float32), "x", "stop", self.version)] * params.n

    async def load_policy(self, version: int, uri: str) -> None:
        await asyncio.sleep(0)
        if self.refuse_load:
            raise EngineError(f"cannot load {uri}")
        self.version = version


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def fleet_of(
    n: int, *, max_inflight: int = 4, backoff_s: float = 1.0
) -> tuple[EngineFleet, list[FakeEngine], Clock]:
    engines = [FakeEngine() for _ in range(n)]
    clock = Clock()
    fleet = EngineFleet(engines, max_inflight_per_engine=max_inflight, backoff_s=backoff_s,
                        clock=clock)  # fmt: skip
    return fleet, engines, clock


async def served_by(fleet: EngineFleet, engines: list[FakeEngine], *keys: str) -> int:
    before = [e.served for e in engines]
    await fleet.generate([1, 2, 3], PARAMS, affinity=keys)
    (index,) = [i for i, e in enumerate(engines) if e.served != before[i]]
    return index


async def test_the_fleet_is_an_engine_that_starts_and_closes_them_all() -> None:
    fleet, engines, _ = fleet_of(2)
    engine: Engine = fleet
    await engine.start()
    await engine.close()
    assert all(e.started and e.closed for e in engines)


async def test_a_rollout_and_its_group_go_where_they_were_served_before():
    fleet, engines, _ = fleet_of(3)
    home = await served_by(fleet, engines, "r1", "g")
    assert await served_by(fleet, engines, "r1", "g") == home
    assert await served_by(fleet, engines, "r2", "g") == home  # a group member
    assert await served_by(fleet, engines, "r9", "h") != home  # a new group spreads out
    with routing_affinity("r1", "g"):  # as the service passes it
        assert await served_by(fleet, engines) == home


async def test_a_full_engine_spills_to_the_least_loaded():
    fleet, engines, _ = fleet_of(3, max_inflight=1)
    gate = asyncio.Event()
    for e in engines:
        e.gate = gate
    calls = [asyncio.create_task(fleet.generate([1], PARAMS, affinity=("r1",))) for _ in range(3)]
    await asyncio.sleep(0)
    assert fleet.router.loads == [1, 1, 1]
    gate.set()
    await asyncio.gather(*calls)
    assert [e.served for e in engines] == [1, 1, 1]
    assert fleet.router.loads == [0, 0, 0]


async def test_an_unavailable_engine_is_taken_out_and_its_call_served_elsewhere():
    fleet, engines, clock = fleet_of(2, backoff_s=5.0)
    home = await served_by(fleet, engines, "r1")
    engines[home].fail_with = EngineUnavailableError("down")
    moved = await served_by(fleet, engines, "r1")
    assert moved != home
    assert fleet.router.routable(clock.now) == [moved]
    engines[home].fail_with = None
    clock.now += 5.0
    engines[moved].available = False  # the engine says it is down: only the other is left
    assert await served_by(fleet, engines, "r1") == home


async def test_a_lost_connection_with_no_engine_left_is_answered_503():
    fleet, engines, _ = fleet_of(1)
    engines[0].fail_with = ConnectionRefusedError()
    with pytest.raises(EngineUnavailableError) as failed:
        await fleet.generate([1], PARAMS)
    assert failed.value.status == 503
    assert fleet.router.loads == [0]


async def test_an_engine_error_blames_the_engine_only_when_the_retry_succeeds():
    fleet, engines, clock = fleet_of(2)
    home = await served_by(fleet, engines, "r1")
    engines[home].fail_with = EngineError("sick")
    assert await served_by(fleet, engines, "r1") != home
    assert home not in fleet.router.routable(clock.now)


async def test_a_call_that_fails_on_two_engines_is_answered_502_and_takes_none_out():
    fleet, engines, clock = fleet_of(3)
    for e in engines:
        e.fail_with = EngineError("this prompt breaks the model")
    with pytest.raises(EngineError) as failed:
        await fleet.generate([1], PARAMS, affinity=("r1",))
    assert failed.value.status == 502
    assert fleet.router.routable(clock.now) == [0, 1, 2]
    assert sum(fleet.router.strikes) == 0


async def test_with_no_engine_left_calls_are_answered_503_with_retry_after():
    fleet, engines, _ = fleet_of(2, backoff_s=4.0)
    for e in engines:
        e.fail_with = EngineUnavailableError("down")
    with pytest.raises(EngineUnavailableError):
        await fleet.generate([1], PARAMS)  # tried on both, both taken out
    with pytest.raises(EngineUnavailableError) as refused:
        await fleet.generate([1], PARAMS)
    assert str(refused.value) == NO_ENGINE
    assert refused.value.retry_after_s == 4
    assert all(e.served == 0 for e in engines)


async def test_every_call_is_tagged_with_the_version_of_the_engine_that_served_it():
    fleet, engines, _ = fleet_of(2)
    engines[0].version, engines[1].version = 3, 2
    assert fleet.policy_version == 2  # every call from now on is at least v2
    for keys in (("a",), ("b",), ("c",), ("d",)):
        before = [e.served for e in engines]
        (generation,) = await fleet.generate([1], PARAMS, affinity=keys)
        (index,) = [i for i, e in enumerate(engines) if e.served != before[i]]
        assert generation.policy_version == engines[index].version
    engines[1].available = False  # a dead engine does not hold the version back
    assert fleet.policy_version == 3
    engines[1].available = True
    await fleet.load_policy(4, "file:///p/4")
    assert [e.version for e in engines] == [4, 4] and fleet.policy_version == 4


async def test_a_policy_one_engine_cannot_load_still_reaches_the_others():
    fleet, engines, _ = fleet_of(3)
    engines[1].refuse_load = True
    with pytest.raises(EngineError):
        await fleet.load_policy(1, "file:///p/1")
    assert [e.version for e in engines] == [1, 0, 1]
    assert fleet.policy_version == 0


async def test_a_cancelled_call_frees_its_place():
    fleet, engines, _ = fleet_of(2)
    engines[0].gate = asyncio.Event()
    call = asyncio.create_task(fleet.generate([1], PARAMS, affinity=("r1",)))
    await asyncio.sleep(0)
    assert fleet.router.loads == [1, 0]
    call.cancel()
    await asyncio.gather(call, return_exceptions=True)
    assert fleet.router.loads == [0, 0]


async def test_a_gateway_serves_chat_through_a_fleet_of_embedded_engines(tiny_policy):
    engines = [
        EmbeddedEngine(tiny_policy, max_batch_size=4, batch_wait_ms=5, max_context=256)
        for _ in range(2)
    ]
    fleet = EngineFleet(engines, max_inflight_per_engine=4)
    settings = GatewaySettings(admin_key=ADMIN_KEY, port=8000, model_dir=tiny_policy,
                               follow_policy=False, max_context_tokens=256)  # fmt: skip
    app = create_app(settings, fleet, MemoryEventLog())
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http,
    ):
        rollout = (await http.post("/rollouts", json={"task_id": "t"}, headers=ADMIN)).json()
        key = {"Authorization": f"Bearer {rollout['api_key']}"}
        for _ in range(3):
            answer = await http.post(
                f"/rollouts/{rollout['rollout_id']}/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "hi"}],
                      "max_tokens": 3},
                headers=key,
            )  # fmt: skip
            assert answer.status_code == 200, answer.text
        assert (await http.get("/health")).json()["policy_version"] == 0
    assert fleet.router.loads == [0, 0]
    assert fleet.router.counts.kept == 2  # the second call went where the first was served
