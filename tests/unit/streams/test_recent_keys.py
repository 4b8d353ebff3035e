"""The sequencer's bounded deduplication: a completion applied once however late its copy
comes, with memory that stays flat over a run of any length."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from schemas.records import QueueEntry
from streams.pipeline_config import PipelineConfig
from streams.sequencing.recent_keys import RecentKeys
from streams.sequencing.sequencer import EventTimeSequencer
from tests.builders import T0
from tests.unit.streams.test_sequencer_restart import completion


def test_a_key_is_remembered_for_the_horizon_past_the_time_it_was_seen():
    keys: RecentKeys[str] = RecentKeys(horizon_s=10.0)
    assert keys.first_sight("a", 100.0) and keys.first_sight("b", 105.0)
    assert not keys.first_sight("a", 107.0)  # seen already, and not seen anew at 107
    keys.forget_before(110.0)
    assert not keys.first_sight("a", 110.0) and len(keys) == 2
    keys.forget_before(110.5)  # a: seen at 100, more than 10 s before
    assert len(keys) == 1 and keys.first_sight("a", 110.5)


def queued_at(sequencer: EventTimeSequencer, index: int, at_s: float) -> None:
    entry = QueueEntry(f"r{index}", f"g{index}", 1, T0 + timedelta(seconds=at_s))
    sequencer.add_queue_entry(index, entry)


def test_a_copy_within_the_horizon_is_recorded_once_and_one_past_it_is_refused():
    t0 = T0.timestamp()
    sequencer = EventTimeSequencer(window=None, dedupe_horizon_s=100.0, records=True)
    queued_at(sequencer, 0, 0.0)
    sequencer.add_completion(completion(0, 5.0))
    sequencer.advance(t0 + 10)
    for i in range(1, 40):  # event time moves on, 10 s a rollout
        if i == 5:
            sequencer.add_completion(completion(0, 5.0))  # a copy, late but within the horizon
        queued_at(sequencer, i, 10.0 * i)
        sequencer.add_completion(completion(i, 10.0 * i + 1))
        sequencer.advance(t0 + 10.0 * i + 2)
    sequencer.add_completion(completion(0, 5.0))  # a copy past the horizon
    sequencer.advance(t0 + 500)
    recorded = [t.rollout_id for t in sequencer.drain_recorded()]
    assert recorded.count("r0") == 1 and len(recorded) == 40
    assert sequencer.stats["expired_completions"] == 1
    assert sequencer.stats["late_facts"] == 1  # the copy within the horizon
    assert sequencer.stats["remembered"] <= 11  # 100 s of event time at 10 s a rollout


def test_a_replay_applies_every_fact_however_far_apart_they_were_written():
    replay = EventTimeSequencer(window=None, dedupe_horizon_s=100.0, records=True)
    for i in (0, 1):
        queued_at(replay, i, 0.0)
    replay.add_completion(completion(1, 10_000.0))  # fed first, a day of event time later
    replay.add_completion(completion(0, 5.0))
    replay.add_completion(completion(0, 5.0))  # and a copy
    samples = replay.advance(float("inf"))
    assert [s.queue_index for s in samples] == [0, 1]
    assert [t.rollout_id for t in replay.drain_recorded()] == ["r0", "r1"]
    assert replay.stats["expired_completions"] == 0


def test_an_unqueued_copy_past_the_horizon_is_refused_not_recorded_again():
    t0 = T0.timestamp()
    sequencer = EventTimeSequencer(window=None, dedupe_horizon_s=100.0, records=True)
    unqueued = dataclasses.replace(completion(9, 5.0), queue_index=-1)
    sequencer.add_completion(unqueued)
    queued_at(sequencer, 0, 300.0)
    sequencer.add_completion(completion(0, 301.0))
    sequencer.advance(t0 + 400)
    sequencer.add_completion(unqueued)
    assert [t.rollout_id for t in sequencer.drain_recorded()] == ["r9", "r0"]
    assert sequencer.stats["expired_completions"] == 1


def test_the_horizon_is_an_hour_or_four_of_the_longest_timeout():
    assert PipelineConfig().dedupe_horizon == timedelta(hours=1)
    config = PipelineConfig(item_timeout_s=None, group_timeout_s=1800.0)
    assert config.dedupe_horizon == timedelta(hours=2)
    assert config.sequencer().dedupe_horizon_s == 7200.0
