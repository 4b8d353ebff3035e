"""Table deletions held until the input that caused them is committed (pure).

A worker killed with -9 restarts from its committed offsets and its tables' changelogs. If a
rollout's or a group's state were deleted as soon as it was sent on, a kill before the offset
commit would leave the deletion in the changelog but the input to be read again: re-read, it
finds nothing (a group's members half gone, its analytics rows never written) or starts the
state over from a part of the log. Held until the commit, the deletion happens only once the
input can no longer come back; before that, input read again finds the state whole and does
exactly what it did the first time.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Generic, TypeVar

T = TypeVar("T")


class AfterCommit(Generic[T]):
    """Items held per partition, each with the offset of the message that caused it."""

    def __init__(self) -> None:
        self._held: dict[int, list[tuple[int, T]]] = {}

    def hold(self, partition: int, offset: int, item: T) -> None:
        self._held.setdefault(partition, []).append((offset, item))

    def release(self, partition: int, committed: int | None) -> list[T]:
        """The items whose message is below ``committed`` (the partition's committed offset:
        the next one a restart would read), in the order they were held."""
        held = self._held.get(partition)
        if not held or committed is None:
            return []
        due = [item for offset, item in held if offset < committed]
        if due:
            self._held[partition] = [(o, item) for o, item in held if o >= committed]
        return due

    def keep_only(self, partitions: Iterable[int]) -> list[T]:
        """Drop what is held for partitions this worker no longer owns (their new owner finds
        the state in the tables); the dropped items are returned."""
        owned = set(partitions)
        dropped: list[T] = []
        for partition in set(self._held) - owned:
            dropped.extend(item for _, item in self._held.pop(partition))
        return dropped

    def held(self, partition: int) -> int:
        return len(self._held.get(partition, ()))
