"""Keys seen within a horizon of event time: the sequencer's deduplication, bounded (pure).

A week-long run applies millions of completions; remembering each one's key for good grows
the worker without end. A key is remembered ``horizon_s`` of event time past the time it was
seen at, then forgotten. The sequencer refuses a fact older than the horizon outright
(``EventTimeSequencer.add_completion``), so a key is forgotten only once no copy of its fact
can be applied again: a duplicate is either still remembered or refused.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass
class RecentKeys(Generic[K]):
    horizon_s: float
    _seen_at: dict[K, float] = field(default_factory=dict)
    _by_time: list[tuple[float, int, K]] = field(default_factory=list)
    _tiebreak: itertools.count[int] = field(default_factory=itertools.count)

    def first_sight(self, key: K, at: float) -> bool:
        """Remember ``key`` as seen at event time ``at``; False if it is remembered already."""
        if key in self._seen_at:
            return False
        self._seen_at[key] = at
        heapq.heappush(self._by_time, (at, next(self._tiebreak), key))
        return True

    def forget_before(self, now: float) -> None:
        """Forget every key seen more than ``horizon_s`` before event time ``now``."""
        limit = now - self.horizon_s
        while self._by_time and self._by_time[0][0] < limit:
            _, _, key = heapq.heappop(self._by_time)
            del self._seen_at[key]

    def __len__(self) -> int:
        return len(self._seen_at)
