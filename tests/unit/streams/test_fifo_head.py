"""Each sample carries the queue head a trainer reaches by training it: with a window, items
past a slow one are trained first, and one past the highest index trained would overstate
what is consumed (admission would let more in than the staleness bound allows)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from schemas.records import QueueEntry
from streams.sequencing.sequencer import EventTimeSequencer
from tests.builders import T0, trajectory
from trainer.step_record import consumed_below


def completion(index: int, at_s: float):
    return dataclasses.replace(
        trajectory(), rollout_id=f"r{index}", queue_index=index,
        group_completed_ts=T0 + timedelta(seconds=at_s),
    )  # fmt: skip


def test_items_past_a_slow_one_do_not_move_the_head_past_it():
    sequencer = EventTimeSequencer(window=3)
    for i in range(4):
        sequencer.add_queue_entry(i, QueueEntry(f"r{i}", f"g{i}", 1, T0 + timedelta(seconds=i)))
    for index, at in ((1, 5.0), (2, 6.0), (3, 7.0)):
        sequencer.add_completion(completion(index, at))
    first = sequencer.advance(T0.timestamp() + 10)
    assert [(s.queue_index, s.fifo_head) for s in first] == [(1, 0), (2, 0)]
    assert max(x.queue_index + 1 for x in first) == 3  # what the trainer reported before
    sequencer.add_completion(completion(0, 12.0))
    rest = sequencer.advance(T0.timestamp() + 20)
    assert [(s.queue_index, s.fifo_head) for s in rest] == [(0, 3), (3, 4)]
    assert [consumed_below(s) for s in first + rest] == [0, 0, 3, 4]


def test_samples_emitted_together_hold_the_head_below_the_ones_after_them():
    sequencer = EventTimeSequencer(window=None)
    for i in range(3):
        sequencer.add_queue_entry(i, QueueEntry(f"r{i}", f"g{i}", 1, T0))
        sequencer.add_completion(completion(i, 5.0))
    samples = sequencer.advance(T0.timestamp() + 10)
    assert [(s.queue_index, s.fifo_head) for s in samples] == [(0, 1), (1, 2), (2, 3)]


def test_a_sample_from_an_older_log_falls_back_to_one_past_its_index():
    sample = EventTimeSequencer(window=None)
    sample.add_queue_entry(0, QueueEntry("r0", "g0", 1, T0))
    sample.add_completion(completion(0, 1.0))
    (emitted,) = sample.advance(T0.timestamp() + 5)
    assert consumed_below(dataclasses.replace(emitted, fifo_head=-1)) == 1
