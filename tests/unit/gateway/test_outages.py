"""A 503 means the call is in no trajectory, and a failed start blocks nothing."""

from __future__ import annotations

import openai
import pytest

from schemas.records import EventsVoided, RolloutAborted, RolloutStarted
from streams.stage.assembler import RolloutAssembly
from tests.unit.gateway.conftest import ADMIN

CHAT = [{"role": "user", "content": "Guess a digit."}]


def assembled(gw, rollout_id):
    assembly = RolloutAssembly(rollout_id)
    for envelope in gw.log.envelopes(rollout_id):
        assembly.add(envelope)
    return assembly.assemble()


async def test_a_call_answered_503_that_lands_late_is_in_no_trajectory(gw):
    rollout = await gw.new_rollout()
    rid = rollout["rollout_id"]
    sdk = gw.sdk(rollout)
    kept = await sdk.chat.completions.create(model="m", messages=CHAT, max_tokens=3, seed=1)
    gw.log.outage = gw.log.lands_late = True
    try:
        with pytest.raises(openai.APIStatusError) as failed:
            await sdk.chat.completions.create(model="m", messages=CHAT, max_tokens=3, seed=2)
        assert failed.value.status_code == 503
        signal = await gw.http.post(
            f"/rollouts/{rid}/signals", json={"step": 1, "name": "s", "value": 1.0}, headers=ADMIN
        )
        assert signal.status_code == 503
    finally:
        gw.log.lands_late = False
        gw.log.recover()  # the producer's retries deliver both after all
    landed = [e.payload for e in gw.log.envelopes(rid)]
    # started, kept call, 503'd call, then the 503'd signal behind a void of that call
    assert len(landed) == 1 + 2 + 2 + 2
    finish = await gw.http.post(
        f"/rollouts/{rid}/finish", json={"outcome_reward": 1}, headers=ADMIN
    )
    assert finish.status_code == 200
    *_, void = [e.payload for e in gw.log.envelopes(rid) if isinstance(e.payload, EventsVoided)]
    assert len(void.event_ids) == 3  # the 503'd call's two events and the signal
    trajectory = assembled(gw, rid)
    assert [c.call_id for c in trajectory.calls] == [kept.id.removeprefix("chatcmpl-")]
    assert trajectory.signals == ()


async def test_a_rollout_whose_start_failed_is_closed_once_the_log_is_back(gw):
    service = gw.app.state.gateway.service
    gw.log.outage = True
    original_enqueue = gw.log.enqueue

    async def enqueue_then_fail(entry):  # the queue entry is stored, RolloutStarted is not
        gw.log.outage = False
        try:
            return await original_enqueue(entry)
        finally:
            gw.log.outage = True

    gw.log.enqueue = enqueue_then_fail
    try:
        response = await gw.http.post(
            "/rollouts", json={"task_id": "t", "group_id": "g-fail", "group_size": 2}, headers=ADMIN
        )
        assert response.status_code == 503
        await service.resolve_failed_starts()  # still down: nothing written, kept for later
    finally:
        del gw.log.enqueue
        gw.log.outage = False
    index = len(gw.log.queue) - 1
    await service.resolve_failed_starts()
    (rid,) = {
        e.rollout_id for e in gw.log.envelopes() if e.payload == RolloutAborted("start_failed")
    }
    started, aborted = [e.payload for e in gw.log.envelopes(rid)]
    assert isinstance(started, RolloutStarted) and started.queue_index == index
    assert started.group_id == "g-fail" and aborted.reason == "start_failed"
    assert assembled(gw, rid).status == "aborted"
    await service.resolve_failed_starts()
    assert len(gw.log.envelopes(rid)) == 2


async def test_an_engine_that_is_down_is_reported_by_health_and_metrics(gw, monkeypatch):
    monkeypatch.setattr(type(gw.engine), "available", property(lambda self: False))
    health = await gw.http.get("/health")
    assert health.status_code == 503
    assert health.json() == {
        "status": "unavailable", "policy_version": 0, "engine": "down", "renderer": "qwen3",
        "renderer_note": "qwen3: detected",
    }  # fmt: skip
    assert "forge_gateway_engine_up 0.0" in (await gw.http.get("/metrics")).text
    monkeypatch.undo()
    assert (await gw.http.get("/health")).json()["engine"] == "up"
    assert "forge_gateway_engine_up 1.0" in (await gw.http.get("/metrics")).text
