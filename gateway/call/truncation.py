"""Early truncation: when a rollout is plainly failing, end it rather than run it out (pure).

A rollout is truncated once ``negative_steps`` consecutive steps each have a negative net
process signal — the task's own signals and the tool outcomes the gateway recorded
(``schemas.tool_outcomes``), counted as the scorer counts them. The gateway decides it where
the rollout is, writes it to the log as the rollout's end (``RolloutFinished`` with status
``truncated`` and the reason), and a replay trains the same truncated rollout without deciding
again; the scorer gives it its domain's ``truncated_outcome``.
"""

from __future__ import annotations

from collections.abc import Sequence

from schemas.pipeline_file import Truncation


def truncation_reason(values: Sequence[float], rule: Truncation) -> str | None:
    """Why a rollout whose steps have these net signals is truncated, or None."""
    if not rule.enabled:
        return None
    run = 0
    for step, value in enumerate(values):
        run = run + 1 if value < 0 else 0
        if run == rule.negative_steps:
            first = step - run + 1
            return f"{run} consecutive steps with a negative process signal (steps {first}-{step})"
    return None
