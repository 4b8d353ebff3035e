"""The adaptive window (pure) on hand-built completions and step times, then in the sequencer:
as wide as a slow head needs at the trainer's pace, within its cap, the same on any delivery
order of the same facts."""

from __future__ import annotations

import dataclasses
import random
from datetime import timedelta
from pathlib import Path

import pytest

from schemas.errors import ConfigError
from schemas.records import PolicyUpdated, QueueEntry
from streams.config import load_pipeline_config
from streams.sequencing.adaptive_window import AdaptiveWindow
from streams.sequencing.sequencer import EventTimeSequencer
from tests.builders import T0, trajectory


def fed(window: AdaptiveWindow, durations: list[float], policy_times: list[float]) -> int:
    for d in durations:
        window.completed(d)
    for at in policy_times:
        window.policy_published(at)
    return window.window()


def test_the_cap_until_both_durations_and_a_step_interval_are_known():
    assert fed(AdaptiveWindow(cap=16, samples_per_step=4), [1.0] * 100, [5.0]) == 16
    assert fed(AdaptiveWindow(cap=16, samples_per_step=4), [1.0] * 10, [0.0, 5.0]) == 16


def test_equal_durations_leave_no_head_to_wait_for_so_the_window_is_fifo():
    assert fed(AdaptiveWindow(cap=16, samples_per_step=4), [3.0] * 100, [0.0, 5.0]) == 1


def test_the_window_covers_what_the_trainer_takes_while_a_slow_head_lags():
    # durations 1..100: median 50.5, 0.9-quantile 90.1, so a slow head lags 39.6 s; the
    # fastest step took 5 s, so 4 samples a step take 4 * 39.6 / 5 = 31.7 while it lags.
    durations = [float(d) for d in range(1, 101)]
    policy = [0.0, 10.0, 15.0, 23.0]  # intervals 10, 5, 8: the 10 s one waited for data
    assert fed(AdaptiveWindow(cap=64, samples_per_step=4), durations, policy) == 1 + 32
    assert fed(AdaptiveWindow(cap=16, samples_per_step=4), durations, policy) == 16
    slower = [0.0, 20.0, 40.0]  # a trainer twice as slow needs half the window
    assert fed(AdaptiveWindow(cap=64, samples_per_step=4), durations, slower) == 1 + 8


def test_only_recent_completions_count():
    window = AdaptiveWindow(cap=64, samples_per_step=4, memory=100)
    fed(window, [float(d) for d in range(1, 101)], [0.0, 5.0])
    assert fed(window, [7.0] * 100, []) == 1  # the old spread is forgotten


@pytest.mark.parametrize("cap, p, q", [(0, 4, 0.9), (4, 0, 0.9), (4, 4, 0.5), (4, 4, 1.0)])
def test_settings_out_of_range_are_refused(cap, p, q):
    with pytest.raises(ValueError):
        AdaptiveWindow(cap=cap, samples_per_step=p, quantile=q)


def facts(durations: list[float]):
    """Queue entries every second, each completing ``durations[i]`` after it started, and a
    policy every 2 s: a trainer taking 2 samples a step."""
    out: list[tuple[str, object]] = []
    for i, d in enumerate(durations):
        start = T0 + timedelta(seconds=i)
        out.append(("queued", (i, QueueEntry(f"r{i}", f"g{i}", 1, start))))
        end = start + timedelta(seconds=d)
        done = dataclasses.replace(trajectory(), rollout_id=f"r{i}", queue_index=i,
                                   started_ts=start, ended_ts=end)  # fmt: skip
        out.append(("completed", done))
    for v in range(1, len(durations) // 2):
        out.append(("policy", PolicyUpdated(v, v, "", T0 + timedelta(seconds=2 * v))))
    return out


def sequenced(sequencer: EventTimeSequencer, delivered) -> list[int]:
    for kind, fact in delivered:
        if kind == "queued":
            sequencer.add_queue_entry(*fact)
        elif kind == "completed":
            sequencer.add_completion(fact)
        else:
            sequencer.add_policy(fact)
    return [s.queue_index for s in sequencer.advance(float("inf"))]


def adaptive_sequencer(cap: int) -> EventTimeSequencer:
    return EventTimeSequencer(window=cap, adaptive=AdaptiveWindow(cap, 2, min_completions=8))


def test_in_the_sequencer_equal_durations_keep_queue_order_where_the_cap_would_not():
    durations = [5.0] * 40
    durations[30] = 8.0  # one slow head, once the window has narrowed
    fixed = sequenced(EventTimeSequencer(window=8), facts(durations))
    adaptive = sequenced(adaptive_sequencer(8), facts(durations))
    assert fixed.index(31) < fixed.index(30)  # overtaken within the fixed window
    assert adaptive == sorted(adaptive) == list(range(40))


def test_the_same_facts_in_any_delivery_order_give_the_same_samples():
    rng = random.Random(3)
    durations = [rng.lognormvariate(1.0, 1.0) for _ in range(60)]
    reference = sequenced(adaptive_sequencer(8), facts(durations))
    assert reference != sorted(reference)  # the window mattered
    for seed in range(3):
        shuffled = facts(durations)
        random.Random(seed).shuffle(shuffled)
        assert sequenced(adaptive_sequencer(8), shuffled) == reference


def test_the_pipeline_file_turns_it_on_with_a_cap(tmp_path: Path):
    path = tmp_path / "pipeline.yaml"
    path.write_text("window: 12\nadaptive_window: {samples_per_step: 4}\n")
    sequencer = load_pipeline_config(path).sequencer()
    assert sequencer.adaptive is not None and sequencer.adaptive.cap == 12
    assert load_pipeline_config(None).sequencer().adaptive is None  # off by default
    path.write_text("window: null\nadaptive_window: {samples_per_step: 4}\n")
    with pytest.raises(ConfigError, match="adaptive_window needs a window"):
        load_pipeline_config(path)
