"""Token-array helpers every service needs in the same form."""

from __future__ import annotations

import numpy as np

from schemas.records import IntArray


def common_prefix(a: IntArray, b: IntArray) -> int:
    """Length of the longest common prefix of two token arrays."""
    n = min(a.shape[0], b.shape[0])
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n
