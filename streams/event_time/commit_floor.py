"""The offset an input partition may be committed at when its state lives only in memory (pure).

The live worker keeps no changelog of open rollouts or groups: the events partition is their
log, and a restart rebuilds them by reading it again from the committed offset. So that offset
never passes the first record of anything still held — a rollout whose group's outputs are
not committed — and otherwise only records already processed. Kafka's own committed offset
is then all a restart needs: what lies before it is done, by identity of what was held, never
by a count.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class CommitFloor(Generic[K]):
    """One partition's holds (a key and the offset of its first message) and processed end."""

    def __init__(self) -> None:
        self._held: dict[K, int] = {}
        self._next: int | None = None

    def processed(self, offset: int) -> None:
        """The message at ``offset`` is handled: whatever it started is held by now."""
        if self._next is None or offset >= self._next:
            self._next = offset + 1

    def hold(self, key: K, offset: int) -> None:
        """``key`` (a rollout, a group) has state from the message at ``offset`` on; a key
        held already keeps its first offset."""
        self._held.setdefault(key, offset)

    def release(self, key: K) -> None:
        """What ``key`` held is sent on and acknowledged: it never needs reading again."""
        self._held.pop(key, None)

    def holds(self, key: K) -> bool:
        return key in self._held

    @property
    def next(self) -> int | None:
        """The next offset to process (None before any message)."""
        return self._next

    @property
    def held(self) -> int:
        return len(self._held)

    def floor(self) -> int | None:
        """The offset to commit (the next a restart reads); None before any message."""
        if self._next is None:
            return None
        if not self._held:
            return self._next
        return min(self._next, min(self._held.values()))
