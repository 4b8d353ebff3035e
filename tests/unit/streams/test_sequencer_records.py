"""What the sequencer hands to analytics: each rollout's first scoring applied, once."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from schemas.records import PolicyUpdated
from streams.pipeline_config import PipelineConfig
from streams.sequencing.sequencer import EventTimeSequencer
from tests.builders import T0
from tests.unit.streams.test_sequencer_restart import completion, queued


def rescored(index: int, at_s: float, reward: float):
    """The same rollout scored again (at-least-once) with other content."""
    first = completion(index, at_s)
    return dataclasses.replace(first, total_reward=reward)


def policy(version: int) -> PolicyUpdated:
    """Published before the queue: the builder's calls were generated with policy 2."""
    return PolicyUpdated(version, version, f"file:///p/{version}", T0 - timedelta(seconds=1))


def test_a_group_scored_twice_is_recorded_as_the_scoring_the_fifo_kept():
    sequencer = EventTimeSequencer(window=None, records=True)
    sequencer.add_policy(policy(2))
    queued(sequencer, 2)
    sequencer.add_completion(rescored(0, 5.0, reward=1.0))
    sequencer.add_completion(rescored(0, 6.0, reward=0.0))  # its second scoring
    sequencer.add_completion(completion(1, 7.0))
    (sample_0, sample_1) = sequencer.advance(T0.timestamp() + 10)
    recorded = sequencer.drain_recorded()
    assert [(t.rollout_id, t.total_reward) for t in recorded] == [
        ("r0", 1.0), (sample_1.sample_id, sample_1.trajectory.total_reward),
    ]  # fmt: skip
    assert sample_0.trajectory.total_reward == 1.0 and sample_0.staleness == 0
    sequencer.add_completion(rescored(0, 8.0, reward=0.5))  # after its sample was emitted
    sequencer.advance(T0.timestamp() + 20)
    assert sequencer.drain_recorded() == []


def test_consumed_indices_are_not_recorded_again_and_unqueued_rollouts_are():
    sequencer = EventTimeSequencer(window=None, consumed=frozenset({0}), records=True)
    queued(sequencer, 2)
    sequencer.add_completion(completion(0, 5.0))
    sequencer.add_completion(completion(1, 6.0))
    unqueued = dataclasses.replace(completion(9, 6.5), queue_index=-1)
    sequencer.add_completion(unqueued)
    sequencer.add_completion(unqueued)
    sequencer.advance(T0.timestamp() + 10)
    assert [t.rollout_id for t in sequencer.drain_recorded()] == ["r9", "r1"]


def test_the_staleness_a_sample_was_consumed_at_travels_with_it():
    sequencer = EventTimeSequencer(window=None, records=True)
    queued(sequencer, 1)
    sequencer.add_policy(policy(5))  # three versions past the one its calls came from
    sequencer.add_completion(completion(0, 5.0))
    (sample,) = sequencer.advance(T0.timestamp() + 10)
    assert sample.staleness == 3


def test_a_sequencer_asked_for_no_records_keeps_no_trajectory():
    """A worker with no sink never drains: what it is not asked to record it must not keep."""
    sequencer = PipelineConfig(window=None).sequencer()
    queued(sequencer, 200)
    for i in range(200):
        sequencer.add_completion(completion(i, 5.0 + i))
    assert len(sequencer.advance(T0.timestamp() + 300)) == 200
    assert sequencer.recorded == [] and sequencer.drain_recorded() == []
    recording = PipelineConfig(window=None).sequencer(records=True)
    queued(recording, 1)
    recording.add_completion(completion(0, 5.0))
    recording.advance(T0.timestamp() + 10)
    assert [t.rollout_id for t in recording.drain_recorded()] == ["r0"]
