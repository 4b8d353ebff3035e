"""The pure pipeline: assembly, group scoring and event-time sequencing, deterministic."""

from __future__ import annotations

import math
import random
import uuid
from datetime import timedelta
from math import inf

import numpy as np
import pytest

from schemas.pipeline_file import RewardConfig
from schemas.records import (
    Envelope,
    ProcessSignal,
    QueueEntry,
    RolloutAborted,
    RolloutFinished,
    RolloutStarted,
)
from streams.pipeline_config import PipelineConfig
from streams.replay.pipeline import process_log
from tests.builders import T0, model_request, model_response

NO_SPEED = RewardConfig(speed_weight=0.0)


def env(rid, payload, seconds):
    return Envelope(str(uuid.uuid4()), rid, T0 + timedelta(seconds=seconds), "test", payload)


def rollout(
    rid, group, size, index, start, end, outcome=1.0, calls=2, aborted=False, n=1, domain="default"
):
    started = RolloutStarted("task", group, size, 0, {}, index, domain=domain)
    events = [env(rid, started, start)]
    parent = None
    for c in range(calls):
        call_id = f"{rid}-c{c}"
        req = model_request(
            call_id=call_id, parent_call_id=parent, shared_prefix_len=4 if parent else 0, n=n
        )
        events.append(env(rid, req, start + 0.1 * (c + 1)))
        for k in range(n):
            events.append(
                env(rid, model_response(call_id=call_id, choice_index=k), start + 0.1 * (c + 1))
            )
        parent = call_id
    events.append(env(rid, ProcessSignal(0, "progress", 0.25), start + 0.5))
    end_event = RolloutAborted("timeout") if aborted else RolloutFinished("success", outcome)
    events.append(env(rid, end_event, end))
    return events


def queue_entries(specs):
    return [(index, QueueEntry(rid, group, size, T0 + timedelta(seconds=start)))
            for rid, group, size, index, start in specs]  # fmt: skip


def scenario():
    """Three groups of two; group g1 finishes last although it entered the queue first."""
    specs = [("a", "g1", 2, 0, 0.0), ("b", "g1", 2, 1, 0.0), ("c", "g2", 2, 2, 1.0),
             ("d", "g2", 2, 3, 1.0), ("e", "g3", 2, 4, 2.0), ("f", "g3", 2, 5, 2.0)]  # fmt: skip
    ends = {"a": 30.0, "b": 31.0, "c": 5.0, "d": 6.0, "e": 8.0, "f": 9.0}
    outcomes = {"a": 1.0, "b": 0.0, "c": 1.0, "d": 1.0, "e": 0.0, "f": 1.0}
    events = []
    for rid, group, size, index, start in specs:
        events.append(rollout(rid, group, size, index, start, ends[rid], outcomes[rid]))
    return events, queue_entries(specs)


def delivered(per_rollout, seed):
    """Interleave rollouts randomly (order within a rollout kept) and duplicate some events."""
    rng = random.Random(seed)
    queues = [list(events) for events in per_rollout]
    out = []
    while any(queues):
        q = rng.choice([q for q in queues if q])
        event = q.pop(0)
        out.append(event)
        if rng.random() < 0.2:
            out.append(event)
    return out


def summary(result):
    return [
        (s.sample_id, s.queue_index, [c.advantage for c in s.trajectory.calls])
        for s in result.samples
    ]


def test_output_is_independent_of_delivery_order_and_duplicates():
    per_rollout, queue = scenario()
    config = PipelineConfig(rewards=NO_SPEED, window=2)
    reference = process_log(delivered(per_rollout, 0), queue, [], config)
    for seed in range(1, 6):
        again = process_log(delivered(per_rollout, seed), list(reversed(queue)), [], config)
        assert summary(again) == summary(reference)
    assert reference.stats["duplicate_events"] > 0


def test_window_orders_by_queue_index_fifo_and_by_completion_greedy():
    per_rollout, queue = scenario()
    events = [e for r in per_rollout for e in r]
    fifo = process_log(events, queue, [], PipelineConfig(rewards=NO_SPEED, window=1))
    assert [s.queue_index for s in fifo.samples] == [0, 1, 2, 3, 4, 5]
    greedy = process_log(events, queue, [], PipelineConfig(rewards=NO_SPEED, window=None))
    assert [s.sample_id for s in greedy.samples] == ["c", "d", "e", "f", "a", "b"]
    windowed = process_log(events, queue, [], PipelineConfig(rewards=NO_SPEED, window=3))
    # g2 (indices 2, 3) completes first: only index 2 lies in [0, 3); g3 (4, 5) waits for g1
    assert [s.sample_id for s in windowed.samples] == ["c", "a", "b", "d", "e", "f"]


def test_group_advantages_by_hand():
    per_rollout, queue = scenario()
    events = [e for r in per_rollout for e in r]
    result = process_log(events, queue, [], PipelineConfig(rewards=NO_SPEED, window=None))
    by_id = {s.sample_id: s.trajectory for s in result.samples}
    # a: signal 0.25 at step 0, outcome 1 at step 1 -> R = (1.25, 1.0); b: (0.25, 0.0); B = 0.75
    assert [c.return_to_go for c in by_id["a"].calls] == pytest.approx([1.25, 1.0])
    assert [c.advantage for c in by_id["a"].calls] == pytest.approx([0.5, 0.25])
    assert [c.advantage for c in by_id["b"].calls] == pytest.approx([-0.5, -0.75])
    assert by_id["a"].total_reward == pytest.approx(1.25)


def test_another_reward_config_changes_rewards_not_samples():
    per_rollout, queue = scenario()
    events = [e for r in per_rollout for e in r]
    base = process_log(events, queue, [], PipelineConfig(rewards=NO_SPEED, window=2))
    other = process_log(
        events,
        queue,
        [],
        PipelineConfig(rewards=RewardConfig(outcome_weight=3.0, speed_weight=0.0), window=2),
    )
    assert [s.sample_id for s in base.samples] == [s.sample_id for s in other.samples]
    assert summary(base) != summary(other)


def test_group_timeout_scores_the_members_that_ended():
    events = rollout("x", "g", 3, 0, 0.0, 2.0) + rollout("y", "g", 3, 1, 0.0, 3.0)
    late = [
        env("z", RolloutStarted("task", "g", 3, 0, {}, 2), 0.0),
        env("other", RolloutStarted("t", "h", 1, 0, {}, 3), 100.0),
    ]
    queue = queue_entries([("x", "g", 3, 0, 0.0), ("y", "g", 3, 1, 0.0), ("z", "g", 3, 2, 0.0)])
    config = PipelineConfig(
        rewards=NO_SPEED, window=None, group_timeout_s=50.0, item_timeout_s=60.0
    )
    result = process_log(events + late, queue, [], config)
    assert sorted(s.sample_id for s in result.samples) == ["x", "y"]
    assert result.stats["group_timeouts"] == 1
    assert result.stats["rollouts_incomplete"] == 2


def test_choices_become_separate_calls_with_unambiguous_parents():
    events = rollout("r", "g", 1, 0, 0.0, 1.0, calls=2, n=2)
    result = process_log(
        events, queue_entries([("r", "g", 1, 0, 0.0)]), [], PipelineConfig(window=None)
    )
    calls = result.samples[0].trajectory.calls
    assert [c.call_id for c in calls] == ["r-c0", "r-c0#1", "r-c1", "r-c1#1"]
    assert [c.step for c in calls] == [0, 0, 1, 1]
    assert calls[2].parent_call_id == "r-c0"
    assert np.array_equal(calls[0].completion_token_ids, model_response().completion_token_ids)


def test_aborted_rollouts_are_scored_and_sequenced():
    events = rollout("ok", "g", 2, 0, 0.0, 2.0, outcome=1.0) + rollout(
        "dead", "g", 2, 1, 0.0, 5.0, aborted=True
    )
    queue = queue_entries([("ok", "g", 2, 0, 0.0), ("dead", "g", 2, 1, 0.0)])
    result = process_log(events, queue, [], PipelineConfig(rewards=NO_SPEED, window=None))
    statuses = {s.sample_id: s.trajectory.status for s in result.samples}
    assert statuses == {"ok": "finished", "dead": "aborted"}


def test_incremental_sequencing_equals_the_batch_result():
    """A live sequencer fed in arbitrary order with watermarks emits what a replay emits."""
    from streams.sequencing.sequencer import EventTimeSequencer

    per_rollout, queue = scenario()
    config = PipelineConfig(rewards=NO_SPEED, window=2)
    batch = process_log([e for r in per_rollout for e in r], queue, [], config)
    facts = [("q", index, entry) for index, entry in queue] + [
        ("t", t.queue_index, t) for t in batch.trajectories
    ]
    facts.sort(key=lambda f: (f[2].ts if f[0] == "q" else f[2].group_completed_ts, f[0]))
    live = EventTimeSequencer(config.window, config.item_timeout_s)
    emitted = []
    for kind, index, fact in facts:
        if kind == "q":
            live.add_queue_entry(index, fact)
        else:
            live.add_completion(fact)
        ts = fact.ts if kind == "q" else fact.group_completed_ts
        emitted += live.advance(ts.timestamp() - 1.0)  # a watermark one second behind
    emitted += live.advance(float("inf"))
    assert [s.sample_id for s in emitted] == [s.sample_id for s in batch.samples]
    assert live.stats["late_facts"] == 0


def test_a_non_finite_outcome_is_left_out_of_the_replay_and_counted():
    """An Infinity outcome already in the log (older log, another producer) is never scored:
    it would have made every reward of its group, and the mean reward, infinite."""
    events = rollout("ok", "g", 2, 0, 0.0, 2.0) + rollout("inf", "g", 2, 1, 0.0, 3.0, outcome=inf)
    queue = queue_entries([("ok", "g", 2, 0, 0.0), ("inf", "g", 2, 1, 0.0)])
    result = process_log(events, queue, [], PipelineConfig(window=None))
    assert [t.rollout_id for t in result.trajectories] == ["ok"]
    assert [s.sample_id for s in result.samples] == ["ok"]
    assert result.stats["rollouts_rejected"] == 1
    assert all(math.isfinite(t.total_reward) for t in result.trajectories)
