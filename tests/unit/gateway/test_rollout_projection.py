"""A gateway that reads the log back serves the rollouts another one started."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import openai
import pytest

from gateway.errors import RolloutClosedError
from schemas.records import ModelRequest, RolloutAborted, RolloutStarted
from tests.unit.gateway.conftest import app_under_test

CHAT = [{"role": "user", "content": "Guess a digit."}]


async def test_a_second_gateway_reading_the_log_continues_the_delta_chain(tiny_policy):
    async with app_under_test(tiny_policy) as first:
        rollout = await first.new_rollout(group_id="g", group_size=2)
        reply = await first.sdk(rollout).chat.completions.create(
            model="m", messages=CHAT, max_tokens=4, seed=1
        )
        log = first.log
    assert {key for _, key in log.keys} == {"g"}  # keyed by group: one partition for it all
    async with app_under_test(tiny_policy) as second:
        second.log.events = list(log.events)  # the same log, read back
        service = second.app.state.gateway.service
        for envelope in second.log.envelopes():
            service.apply(envelope, "g")
        again = second.sdk(rollout)  # same base URL path and key
        follow = [*CHAT, {"role": "assistant", "content": reply.choices[0].message.content},
                  {"role": "user", "content": "higher"}]  # fmt: skip
        await again.chat.completions.create(model="m", messages=follow, max_tokens=4, seed=2)
        requests = [e.payload for e in second.log.envelopes(rollout["rollout_id"])
                    if isinstance(e.payload, ModelRequest)]  # fmt: skip
        assert requests[1].parent_call_id == requests[0].call_id
        assert requests[1].shared_prefix_len > 0
        restored = service.rollouts.get(rollout["rollout_id"])
        assert restored.group_id == "g" and restored.queue_index == 0
        with pytest.raises(openai.AuthenticationError):
            await second.sdk({**rollout, "api_key": "fr-guessed"}).models.list()


def test_applying_the_log_twice_changes_nothing_and_an_end_closes():
    from gateway.call.rollouts import RolloutRegistry, key_hash
    from tests.builders import envelope

    registry = RolloutRegistry(timeout_s=600)
    now = datetime.now(UTC)
    start = envelope(RolloutStarted("t", "g", 1, 0, {}, 3, key_hash("fr-key")), "r1", now)
    end = envelope(RolloutAborted("agent crashed"), "r1", now)
    for event in (start, start):
        registry.apply(event, "g", now, time.monotonic())
    assert registry.id_for_key("fr-key") == "r1" and registry.open("r1").signals == 0
    registry.apply(end, "g", now, time.monotonic())
    with pytest.raises(RolloutClosedError):
        registry.open("r1")


def test_a_rollout_without_its_start_or_key_hash_is_not_resumable():
    from gateway.call.rollouts import RolloutRegistry
    from tests.builders import envelope, model_request

    registry = RolloutRegistry(timeout_s=600)
    now = datetime.now(UTC)
    # keyed as the log was written: an older log by rollout id, a newer one by group id
    registry.apply(envelope(model_request(), "r-old", now), "r-old", now, time.monotonic())
    registry.apply(envelope(RolloutStarted("t", "g", 1, 0), "r-nokey", now), "g", now, 0.0)
    assert {r: u.key for r, u in registry.unresumable.items()} == {"r-old": "r-old", "r-nokey": "g"}


async def test_an_unresumable_rollout_is_aborted_under_the_key_its_events_were_read_with(
    tiny_policy,
):
    from tests.builders import envelope, model_request

    now = datetime.now(UTC)
    async with app_under_test(tiny_policy) as gateway:
        service = gateway.app.state.gateway.service
        service.apply(envelope(model_request(), "r-old", now), "r-old")
        service.apply(envelope(model_request(), "r-new", now), "g-new")
        await service.abort_unresumable()
        assert gateway.log.keys == {("r-old", "r-old"), ("r-new", "g-new")}
        aborted = [e.rollout_id for e in gateway.log.envelopes()
                   if isinstance(e.payload, RolloutAborted)]  # fmt: skip
        assert sorted(aborted) == ["r-new", "r-old"] and not service.rollouts.unresumable
