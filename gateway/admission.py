"""Admission bounds staleness (pure): at most ``limit`` queued rollouts the trainer has not
consumed — the active buffer. With P samples per step and a target of S steps off-policy the
limit is (S+1)·P; with the sequencer's window W the staleness the trainer sees stays within
S + ceil((W-1)/P) (torchtitan's bound, in rollouts). A group is admitted whole: once its first
member is in, the rest of it always is."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class ActiveBuffer:
    limit: int | None
    head: int = 0
    """The trainer's queue head: every index below it is consumed (trained or passed over)."""
    _queued: dict[int, str] = field(default_factory=dict)
    _groups: Counter[str] = field(default_factory=Counter)

    @property
    def active(self) -> int:
        return len(self._queued)

    def admits(self, group_id: str, group_size: int) -> bool:
        if self.limit is None or self._groups[group_id] > 0:
            return True
        return self.active + group_size <= self.limit

    def queued(self, index: int, group_id: str) -> None:
        if index >= self.head and index not in self._queued:
            self._queued[index] = group_id
            self._groups[group_id] += 1

    def consumed_to(self, head: int) -> None:
        """The trainer has consumed the queue below ``head`` (it never moves back)."""
        if head <= self.head:
            return
        self.head = head
        for index in [i for i in self._queued if i < head]:
            group = self._queued.pop(index)
            self._groups[group] -= 1
            if self._groups[group] <= 0:
                del self._groups[group]
