"""The windowed FIFO over the generation queue, as a pure, event-time-driven core.

Queue Q = [T0 … TN-1] (indices are forge.queue offsets), head h, window W:
- a completed item with index in [h, h+W) is emitted at once;
- an item at index >= h+W is never emitted, even if complete;
- h advances only past consumed items (emitted or dropped);
- an item not completed within ``timeout_s`` of entering the queue (event time) is resolved
  as dropped, so one dead agent cannot block the head;
- a completed item more than ``max_staleness`` policy versions behind is dropped, counted;
- a completed item with nothing to train (``complete(..., trainable=False)``) is dropped as it
  completes, counted: it takes its place in the order like any other and holds no one back;
- an index in ``consumed`` (already emitted before a restart, known by identity) is consumed
  as soon as its queue entry is seen, whether or not its completion is still in the log.
W=1 is strict FIFO and W=None (∞) is greedy completion order: the same code, another W.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Emitted(Generic[T]):
    index: int
    item: T
    staleness: int


@dataclass(frozen=True)
class Dropped:
    index: int
    reason: Literal["timeout", "stale", "no_signal"]


@dataclass
class FifoStats:
    emitted: int = 0
    dropped_timeout: int = 0
    dropped_stale: int = 0
    dropped_no_signal: int = 0
    late: int = 0
    """Completions that arrived after their item was resolved (timed out)."""


@dataclass
class _Slot(Generic[T]):
    enqueued_at: float
    item: T | None = None
    policy_version: int = 0
    completed: bool = False


@dataclass
class WindowedFifo(Generic[T]):
    window: int | None
    timeout_s: float | None = None
    max_staleness: int | None = None
    consumed: frozenset[int] = frozenset()
    head: int = 0
    stats: FifoStats = field(default_factory=FifoStats)
    _slots: dict[int, _Slot[T]] = field(default_factory=dict)
    _ready: list[int] = field(default_factory=list)
    _deadlines: list[tuple[float, int]] = field(default_factory=list)
    _high_water: int = 0
    _early: dict[int, tuple[T, int, bool]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.window is not None and self.window < 1:
            raise ValueError("window must be >= 1 (or None for greedy)")

    def enqueue(self, index: int, ts: float) -> None:
        """Item ``index`` entered the queue at event time ``ts``.

        Indices arrive in increasing order (forge.queue is one partition); a gap is an offset
        that holds no entry (a transaction marker, a dead letter) and counts as consumed. An
        index seen before is a re-delivery and is ignored.
        """
        if index < self._high_water:
            return
        self._high_water = index + 1
        if index in self.consumed:
            self._early.pop(index, None)
            return
        self._slots[index] = _Slot(ts)
        if self.timeout_s is not None:
            heapq.heappush(self._deadlines, (ts + self.timeout_s, index))
        early = self._early.pop(index, None)
        if early is not None:
            self.complete(index, *early)

    def complete(self, index: int, item: T, policy_version: int, trainable: bool = True) -> None:
        """Item ``index`` finished; ``policy_version`` is the oldest policy that generated it.

        A completion may arrive before its queue entry (another topic); it waits for it.
        """
        if index in self.consumed:
            return
        if index >= self._high_water:
            self._early.setdefault(index, (item, policy_version, trainable))
            return
        slot = self._slots.get(index)
        if slot is None:
            self.stats.late += 1
            return
        if slot.completed:
            return
        if not trainable:
            del self._slots[index]
            self.stats.dropped_no_signal += 1
            return
        slot.item, slot.policy_version, slot.completed = item, policy_version, True
        heapq.heappush(self._ready, index)

    def pending(self) -> int:
        return len(self._slots)

    def poll(self, now: float, current_version: int) -> list[Emitted[T] | Dropped]:
        """Everything that can leave the queue at event time ``now``, in index order per pass."""
        out: list[Emitted[T] | Dropped] = []
        while self._deadlines and self._deadlines[0][0] < now:
            _, index = heapq.heappop(self._deadlines)
            slot = self._slots.get(index)
            if slot is not None and not slot.completed:
                del self._slots[index]
                self.stats.dropped_timeout += 1
                out.append(Dropped(index, "timeout"))
        self._advance()
        while self._ready and (self.window is None or self._ready[0] < self.head + self.window):
            index = heapq.heappop(self._ready)
            slot = self._slots.pop(index)
            staleness = current_version - slot.policy_version
            if self.max_staleness is not None and staleness > self.max_staleness:
                self.stats.dropped_stale += 1
                out.append(Dropped(index, "stale"))
            else:
                self.stats.emitted += 1
                out.append(Emitted(index, slot.item, staleness))  # type: ignore[arg-type]
            self._advance()
        return out

    def _advance(self) -> None:
        """Move the head past consumed items (and offsets that were never queue entries)."""
        while self.head < self._high_water and self.head not in self._slots:
            self.head += 1
