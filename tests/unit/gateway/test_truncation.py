"""The truncation rule on hand-built step values."""

from __future__ import annotations

from gateway.call.truncation import truncation_reason
from schemas.pipeline_file import Truncation

ON = Truncation(enabled=True, negative_steps=3)


def test_three_negative_steps_in_a_row_truncate_naming_them():
    assert truncation_reason([0.1, -0.1, -0.05, -0.2], ON) == (
        "3 consecutive steps with a negative process signal (steps 1-3)"
    )


def test_a_step_without_a_negative_signal_breaks_the_run():
    assert truncation_reason([-0.1, -0.1, 0.0, -0.1, -0.1], ON) is None
    assert truncation_reason([-0.1, -0.1], ON) is None


def test_nothing_is_truncated_unless_enabled():
    assert truncation_reason([-1.0] * 10, Truncation(negative_steps=1)) is None
