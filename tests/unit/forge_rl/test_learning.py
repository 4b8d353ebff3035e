"""First vs last fifth of a run's rewards."""

from __future__ import annotations

import math

import pytest

from forge_rl.learning import learning_summary


def test_first_and_last_fifth_skip_aborted_rollouts():
    rewards = [0.0, None, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0]
    summary = learning_summary(rewards)
    assert (summary.rollouts, summary.aborted) == (11, 1)
    assert summary.first.rollouts == summary.last.rollouts == 2
    assert summary.first.mean == 0.0 and summary.last.mean == 2.0
    assert summary.overall.rollouts == 10 and summary.overall.mean == pytest.approx(1.0)
    assert summary.gain == 2.0
    assert summary.as_dict()["gain"] == 2.0


def test_std_is_over_rollouts_and_nothing_scored_is_nan():
    summary = learning_summary([0.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 2.0], fraction=0.2)
    assert summary.first.std == pytest.approx(1.0) and summary.last.std == pytest.approx(1.0)
    empty = learning_summary([None, None])
    assert empty.aborted == 2 and math.isnan(empty.first.mean)
