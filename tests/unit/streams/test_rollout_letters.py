"""A whole rollout as a dead letter, the one-message size limit, and the rule that keeps both
paths under it."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from schemas import codec
from schemas.records import ModelRequest, QueueEntry
from streams.pipeline_config import PipelineConfig
from streams.replay.pipeline import process_log
from streams.stage import rollout_letters
from streams.stage.assembler import RolloutAssembly
from streams.stage.events_partition import EventsPartition
from streams.stage.message_size import MESSAGE_LIMIT, size_bound, too_large
from streams.stage.settled_groups import SettledGroups
from tests.builders import T0, all_records, model_request
from tests.unit.streams.test_pipeline import env, rollout

HOUR = timedelta(hours=1)


def test_a_letter_assembles_as_the_log_does():
    events = rollout("r1", "g7", 2, 0, 0.0, 3.0)
    assembly = RolloutAssembly("r1")
    for event in events:
        assembly.add(event)
    letter = rollout_letters.pack(codec.encode(e) for e in events)
    assert [*rollout_letters.messages(letter)] == [codec.encode(e) for e in events]
    assert rollout_letters.assembly_of(letter).assemble() == assembly.assemble()


def test_anything_but_a_whole_rollout_is_a_bad_letter():
    events = rollout("r1", "g7", 2, 0, 0.0, 3.0)
    whole = rollout_letters.pack(codec.encode(e) for e in events)
    other = rollout_letters.pack(codec.encode(e) for e in rollout("r2", "g7", 2, 1, 0.0, 3.0))
    for bad in (
        b"",  # empty
        whole[:-3],  # cut in a message
        whole[:2],  # cut in a length
        rollout_letters.pack([b"garbage"]),  # no event
        rollout_letters.pack(codec.encode(e) for e in events[:-1]),  # no end
        rollout_letters.pack(codec.encode(e) for e in events[1:]),  # no start
        whole + other,  # two rollouts
    ):
        with pytest.raises(rollout_letters.BadLetterError):
            rollout_letters.assembly_of(bad)


def test_the_size_bound_is_never_below_the_encoding():
    for record in all_records():
        assert size_bound(record) >= len(codec.encode(record)), type(record).__name__
    wide = model_request(prompt_tokens=100_000)
    assert size_bound(wide) - len(codec.encode(wide)) < 1000  # tight where it matters


def huge_rollout(rid: str, group: str, index: int) -> list:
    """A finished rollout of three calls, each one message, together over the limit."""
    events = rollout(rid, group, 1, index, 0.0, 9.0, calls=3)
    prompt = np.zeros(MESSAGE_LIMIT // 4 // 3 + 1000, dtype=np.int32)
    for i, event in enumerate(events):
        if isinstance(event.payload, ModelRequest):
            wide = model_request(call_id=event.payload.call_id, prompt_token_ids=prompt)
            events[i] = env(rid, wide, (event.ts - events[0].ts).total_seconds())
    return events


def test_a_rollout_over_one_message_is_oversize_by_either_measure():
    events = huge_rollout("big", "gb", 0)
    raw = [codec.encode(e) for e in events]
    assert all(len(r) < MESSAGE_LIMIT for r in raw)
    packed = len(rollout_letters.pack(raw))
    live = rollout_letters.oversize("big", packed)
    assert live is not None and str(packed) in live and "rollout big's events" in live
    assert rollout_letters.oversize_events("big", events) == live
    small = rollout("s", "g", 1, 1, 0.0, 1.0)
    assert rollout_letters.oversize_events("s", small) is None
    assert (
        rollout_letters.oversize("s", len(rollout_letters.pack(codec.encode(e) for e in small)))
        is None
    )
    assert too_large("x", MESSAGE_LIMIT) is None and too_large("x", MESSAGE_LIMIT + 1)


def test_the_live_worker_and_the_replay_leave_out_the_same_oversize_rollout():
    big, small = huge_rollout("big", "gb", 0), rollout("s", "gs", 1, 1, 0.0, 1.0)
    live = EventsPartition(PipelineConfig(window=None), timedelta(hours=1), SettledGroups(HOUR))
    outputs = [live.add(i, e) for i, e in enumerate(big)]
    [dead] = [d for out in outputs for d in out.dead]  # to forge.dlq, never to its group
    assert dead.key == b"gb" and dead.offset == 0 and "rollout big's events" in dead.reason
    assert live.groups.open_groups == 0 and live.floor() == 0  # until the letter is sent
    live.release(dead.release)
    assert live.floor() == len(big)
    queue = [(0, QueueEntry("big", "gb", 1, T0)), (1, QueueEntry("s", "gs", 1, T0))]
    result = process_log([*big, *small], queue, [], PipelineConfig(window=None))
    assert [s.sample_id for s in result.samples] == ["s"]
    assert result.stats["rollouts_oversize"] == 1
