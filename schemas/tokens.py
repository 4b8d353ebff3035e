"""Small rules over records that every service needs in the same form."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from schemas.records import IntArray, TrajectoryCall


def common_prefix(a: IntArray, b: IntArray) -> int:
    """Length of the longest common prefix of two token arrays."""
    n = min(a.shape[0], b.shape[0])
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


def oldest_policy(calls: Iterable[TrajectoryCall], default: int = 0) -> int:
    """A trajectory's oldest policy version: what its staleness is measured from."""
    return min((c.policy_version for c in calls), default=default)
