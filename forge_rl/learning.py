"""Did the agent get better? Rewards of the first and last fifth of a run's rollouts."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Slice:
    rollouts: int
    mean: float
    std: float


@dataclass(frozen=True)
class LearningSummary:
    rollouts: int
    aborted: int
    first: Slice
    last: Slice
    overall: Slice
    """Every scored rollout of the run."""

    @property
    def gain(self) -> float:
        return self.last.mean - self.first.mean

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "gain": self.gain}


def _slice(rewards: Sequence[float]) -> Slice:
    if not rewards:
        return Slice(0, float("nan"), float("nan"))
    return Slice(len(rewards), statistics.fmean(rewards), statistics.pstdev(rewards))


def learning_summary(
    rewards_by_start: Sequence[float | None], fraction: float = 0.2
) -> LearningSummary:
    """Rollouts in the order they started; aborted ones (None) are counted, not averaged."""
    scored = [r for r in rewards_by_start if r is not None]
    k = max(1, round(len(scored) * fraction)) if scored else 0
    return LearningSummary(
        rollouts=len(rewards_by_start),
        aborted=len(rewards_by_start) - len(scored),
        first=_slice(scored[:k]),
        last=_slice(scored[-k:] if k else []),
        overall=_slice(scored),
    )
