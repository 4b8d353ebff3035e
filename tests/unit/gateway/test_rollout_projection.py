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
    async with app_under_test(tiny_policy) as second:
        second.log.events = list(log.events)  # the same log, read back
        service = second.app.state.gateway.service
        for envelope in second.log.envelopes():
            service.apply(envelope)
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
    from gateway.rollouts import RolloutRegistry, key_hash
    from tests.builders import envelope

    registry = RolloutRegistry(timeout_s=600)
    now = datetime.now(UTC)
    start = envelope(RolloutStarted("t", "g", 1, 0, {}, 3, key_hash("fr-key")), "r1", now)
    end = envelope(RolloutAborted("agent crashed"), "r1", now)
    for event in (start, start):
        registry.apply(event, now, time.monotonic())
    assert registry.id_for_key("fr-key") == "r1" and registry.open("r1").signals == 0
    registry.apply(end, now, time.monotonic())
    with pytest.raises(RolloutClosedError):
        registry.open("r1")


def test_a_rollout_without_its_start_or_key_hash_is_not_resumable():
    from gateway.rollouts import RolloutRegistry
    from tests.builders import envelope, model_request

    registry = RolloutRegistry(timeout_s=600)
    now = datetime.now(UTC)
    registry.apply(envelope(model_request(), "r-old", now), now, time.monotonic())
    registry.apply(envelope(RolloutStarted("t", "g", 1, 0), "r-nokey", now), now, 0.0)
    assert set(registry.unresumable) == {"r-old", "r-nokey"}
