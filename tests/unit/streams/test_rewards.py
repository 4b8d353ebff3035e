"""Rewards against values computed by hand."""

from __future__ import annotations

import pytest

from schemas.pipeline_file import RewardConfig
from schemas.tool_outcomes import merge_signals
from streams.stage.rewards import (
    MemberResult,
    completion_time_reward,
    rewards_to_go,
    score_group,
)

CONFIG = RewardConfig(process_weight=1.0, outcome_weight=1.0, speed_weight=0.5, speed_clip=1.0)


def member(rid, steps, signals=(), outcome=None, duration=10.0, aborted=False, truncated=False):
    return MemberResult(rid, steps, tuple(signals), outcome, duration, aborted, truncated)


def test_rewards_to_go_are_suffix_sums():
    assert rewards_to_go([1.0, 0.0, 2.0, -0.5]) == [2.5, 1.5, 1.5, -0.5]


def test_group_with_process_signals_speed_and_outcome():
    # durations 8 and 12: mean 10; speed = 0.5 * (10-8)/10 = +0.1 and 0.5 * (10-12)/10 = -0.1
    a = member("a", 3, [(0, 0.5), (2, 0.25)], outcome=1.0, duration=8.0)
    b = member("b", 2, [(0, 1.0), (5, 0.5)], outcome=0.0, duration=12.0)
    sa, sb = score_group([a, b], CONFIG)
    assert sa.rewards == pytest.approx((0.5, 0.0, 0.25 + 1.0 + 0.1))
    assert sa.returns == pytest.approx((1.85, 1.35, 1.35))
    # b: signal at step 5 folds into the last step (1)
    assert sb.rewards == pytest.approx((1.0, 0.5 + 0.0 - 0.1))
    assert sb.returns == pytest.approx((1.4, 0.4))
    baseline = (1.85 + 1.4) / 2
    assert sa.advantages == pytest.approx(tuple(r - baseline for r in (1.85, 1.35, 1.35)))
    assert sb.advantages == pytest.approx((1.4 - baseline, 0.4 - baseline))
    assert sa.speed_reward == pytest.approx(0.1)


def test_group_of_one_has_zero_advantage_at_the_start():
    (only,) = score_group([member("a", 2, [(0, 1.0)], outcome=1.0, duration=5.0)], CONFIG)
    assert only.speed_reward == 0.0
    assert only.returns == pytest.approx((2.0, 1.0))
    assert only.advantages == pytest.approx((0.0, -1.0))


def test_all_equal_rewards_give_zero_advantages():
    group = [member(r, 1, outcome=1.0, duration=7.0) for r in "abcd"]
    for scored in score_group(group, CONFIG):
        assert scored.advantages == pytest.approx((0.0,))
        assert scored.speed_reward == 0.0


def test_aborted_members_get_the_aborted_outcome_and_no_speed_reward():
    config = RewardConfig(speed_weight=1.0, aborted_outcome=-1.0)
    done = member("done", 1, outcome=1.0, duration=4.0)
    dead = member("dead", 2, [(0, 0.5)], outcome=None, duration=1.0, aborted=True)
    other = member("other", 1, outcome=0.0, duration=6.0)
    s_done, s_dead, s_other = score_group([done, dead, other], config)
    # finished durations 4 and 6: mean 5; speed(done) = +0.2, speed(other) = -0.2
    assert s_done.total == pytest.approx(1.2)
    assert s_other.total == pytest.approx(-0.2)
    assert s_dead.speed_reward == 0.0
    assert s_dead.returns == pytest.approx((-0.5, -1.0))
    baseline = (1.2 - 0.5 - 0.2) / 3
    assert s_dead.advantages == pytest.approx((-0.5 - baseline, -1.0 - baseline))


def test_speed_reward_is_clipped():
    assert completion_time_reward(100.0, [100.0, 1.0], 1.0, 0.5) == -0.5
    assert completion_time_reward(0.0, [0.0, 0.0], 1.0, 0.5) == 0.0


def test_rollout_without_steps_still_counts_in_the_baseline():
    s_empty, s_one = score_group(
        [member("e", 0, outcome=1.0), member("o", 1, outcome=0.0)], RewardConfig(speed_weight=0)
    )
    assert s_empty.total == 1.0 and s_empty.advantages == ()
    assert s_one.advantages == pytest.approx((-0.5,))


def test_a_truncated_rollout_gets_the_truncated_outcome_and_no_speed_reward():
    # a (10 s) and c (20 s) finished: mean 15; the truncated b (2 s) is neither fast nor counted
    config = RewardConfig(speed_weight=0.5, truncated_outcome=-0.2)
    a = member("a", 1, outcome=1.0, duration=10.0)
    b = member("b", 2, [(0, -0.1), (1, -0.1)], duration=2.0, truncated=True)
    c = member("c", 1, outcome=0.0, duration=20.0)
    sa, sb, _ = score_group([a, b, c], config)
    assert sa.speed_reward == pytest.approx(0.5 * (15 - 10) / 15)
    assert sb.speed_reward == 0.0
    assert sb.rewards == pytest.approx((-0.1, -0.1 - 0.2))
    assert sb.total == pytest.approx(-0.4)


def test_a_truncated_rollout_with_an_outcome_of_its_own_keeps_it():
    (scored,) = score_group([member("t", 1, outcome=0.5, truncated=True)], CONFIG)
    assert scored.total == pytest.approx(0.5)


def test_the_tasks_own_signals_win_at_their_steps():
    task = ((0, 0.5), (2, -1.0))
    tools = ((0, -0.1), (1, 0.05), (2, 0.05), (3, -0.05))
    assert merge_signals(task, tools) == ((0, 0.5), (2, -1.0), (1, 0.05), (3, -0.05))
