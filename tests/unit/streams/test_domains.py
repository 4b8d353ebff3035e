"""Domains through the pure pipeline: each group scored by its domain's rules, a replay with
other per-domain settings re-scoring the same log, tool outcomes and truncation in the rewards,
and groups with nothing to learn left out of forge.train per domain."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from schemas.pipeline_file import Domain, RewardConfig, ToolRewards, Truncation
from schemas.records import (
    TRUNCATED,
    ModelRequest,
    ModelResponse,
    QueueEntry,
    RolloutFinished,
    RolloutStarted,
    ToolCall,
    ToolResult,
)
from streams.pipeline_config import PipelineConfig
from streams.replay.pipeline import process_log
from tests.builders import T0
from tests.unit.streams.test_pipeline import env, queue_entries, rollout

NO_SPEED = RewardConfig(speed_weight=0.0)


def domain(name, outcome_weight=1.0, timeout=900.0):
    rewards = RewardConfig(speed_weight=0.0, outcome_weight=outcome_weight)
    return Domain(name, 0.5, None, timeout, rewards, ToolRewards(), Truncation())


def two_domains():
    """Group m (math, outcomes 1 and 0) and group q (qa, outcomes 1 and 1)."""
    specs = [("a", "m", 2, 0, 0.0), ("b", "m", 2, 1, 0.0), ("c", "q", 2, 2, 1.0),
             ("d", "q", 2, 3, 1.0)]  # fmt: skip
    outcome = {"a": 1.0, "b": 0.0, "c": 1.0, "d": 1.0}
    events = []
    for rid, group, size, index, start in specs:
        name = "math" if group == "m" else "qa"
        events += rollout(rid, group, size, index, start, start + 5, outcome[rid], domain=name)
    return events, queue_entries(specs)


def totals(result):
    return {t.rollout_id: t.total_reward for t in result.trajectories}


def test_each_group_is_scored_with_its_domains_weights_and_carries_its_domain():
    events, queue = two_domains()
    config = PipelineConfig(window=None, domains={"math": domain("math", 2.0), "qa": domain("qa")})
    result = process_log(events, queue, [], config)
    # every rollout has one 0.25 progress signal; the outcome is weighted by its domain
    assert totals(result) == pytest.approx({"a": 2.25, "b": 0.25, "c": 1.25, "d": 1.25})
    assert {t.rollout_id: t.domain for t in result.trajectories} == {
        "a": "math", "b": "math", "c": "qa", "d": "qa"}  # fmt: skip


def test_a_replay_with_other_per_domain_weights_rescores_the_same_log():
    events, queue = two_domains()
    live = PipelineConfig(window=None, domains={"math": domain("math"), "qa": domain("qa")})
    other = dataclasses.replace(live, domains={"math": domain("math", 3.0), "qa": domain("qa")})
    first, second = process_log(events, queue, [], live), process_log(events, queue, [], other)
    assert [s.sample_id for s in first.samples] == [s.sample_id for s in second.samples]
    assert totals(second)["a"] == pytest.approx(3.25) and totals(first)["a"] == pytest.approx(1.25)
    assert totals(second)["c"] == totals(first)["c"]  # qa untouched


def test_a_domain_the_file_does_not_name_is_scored_with_the_top_level_rules():
    events, queue = two_domains()
    config = PipelineConfig(rewards=RewardConfig(speed_weight=0.0, outcome_weight=5.0),
                            window=None, domains={"math": domain("math")})  # fmt: skip
    assert totals(process_log(events, queue, [], config))["c"] == pytest.approx(5.25)


def test_groups_without_learning_signal_are_dropped_and_counted_per_domain():
    events, queue = two_domains()
    config = PipelineConfig(window=None, drop_uniform_groups=True)
    result = process_log(events, queue, [], config)
    assert sorted(s.sample_id for s in result.samples) == ["a", "b"]
    assert result.stats["dropped_no_signal"] == 2
    assert result.stats["dropped_no_signal:qa"] == 2
    assert {t.rollout_id: t.group_reward_spread for t in result.trajectories} == {
        "a": 1.0, "b": 1.0, "c": 0.0, "d": 0.0}  # fmt: skip
    kept = process_log(events, queue, [], PipelineConfig(window=None))
    assert len(kept.samples) == 4


def test_a_domains_group_timeout_is_its_own():
    # x ends at 2 s, its partner never: qa times out at 10 s, math (the default 900 s) waits
    waiting = env("w", RolloutStarted("task", "h", 2, 0, {}, 1, domain="math"), 0.0)
    events = [*rollout("x", "g", 2, 0, 0.0, 2.0, domain="qa"), waiting]
    events.append(env("late", RolloutStarted("task", "z", 1, 0, {}, 2), 60.0))
    config = PipelineConfig(window=None, domains={"qa": domain("qa", timeout=10.0),
                                                  "math": domain("math")})  # fmt: skip
    result = process_log(events, queue_entries([("x", "g", 2, 0, 0.0)]), [], config)
    assert [t.rollout_id for t in result.trajectories] == ["x"]
    assert result.stats["group_timeouts"] == 1


def tool_rollout(rid, index, result_text, end_status="success"):
    """Two calls: the first makes a tool call, the second's request carries its result."""
    tokens = np.arange(3, dtype=np.int32)
    lp = np.zeros(3, dtype=np.float32)
    first = ModelRequest(f"{rid}-0", "chat.completions", "m", tokens, 3)
    made = ModelResponse(f"{rid}-0", tokens, lp, tool_calls=[ToolCall(f"t-{rid}", "f", True, True)])
    second = ModelRequest(f"{rid}-1", "chat.completions", "m", tokens, 3,
                          tool_results=[ToolResult(f"t-{rid}", result_text)])  # fmt: skip
    answer = ModelResponse(f"{rid}-1", tokens, lp, completion_text="the answer is Canberra")
    end = RolloutFinished(end_status, None if end_status == TRUNCATED else 1.0)
    payloads = [RolloutStarted("task", "g", 2, 0, {}, index), first, made, second, answer, end]
    return [env(rid, p, 0.1 * i) for i, p in enumerate(payloads)]


def test_tool_outcomes_in_the_events_become_process_rewards_a_replay_can_rescore():
    events = tool_rollout("ok", 0, "Canberra, Australia") + tool_rollout("bad", 1, "Error: 404")
    queue = [(i, QueueEntry(r, "g", 2, T0)) for i, r in enumerate(["ok", "bad"])]
    base = totals(process_log(events, queue, [], PipelineConfig(rewards=NO_SPEED, window=None)))
    assert base == pytest.approx({"ok": 1.05, "bad": 0.95})
    rules = ToolRewards(used_result=0.5, error_result=-0.5)
    other = PipelineConfig(rewards=NO_SPEED, tool_rewards=rules, window=None)
    assert totals(process_log(events, queue, [], other)) == pytest.approx({"ok": 1.5, "bad": 0.5})


def test_a_truncated_rollout_is_trained_with_the_truncated_outcome():
    events = tool_rollout("ok", 0, "Canberra") + tool_rollout("cut", 1, "x", end_status=TRUNCATED)
    queue = [(i, QueueEntry(r, "g", 2, T0)) for i, r in enumerate(["ok", "cut"])]
    config = PipelineConfig(rewards=RewardConfig(speed_weight=0.0, truncated_outcome=-0.3),
                            window=None)  # fmt: skip
    result = process_log(events, queue, [], config)
    by_id = {t.rollout_id: t for t in result.trajectories}
    assert by_id["cut"].status == TRUNCATED
    assert by_id["cut"].total_reward == pytest.approx(-0.3)
    assert sorted(s.sample_id for s in result.samples) == ["cut", "ok"]
