"""Partitions a worker owns, with records to read, that Faust stopped fetching.

Faust 0.15 fetches only the partitions in its consumer's active set; flow control takes a
partition out while its stream buffer is full and rebalances rebuild the set. In 1 of about 4
runs of the kill -9 restart test a worker restarted into two rebalances (its dead
predecessor still in the group) read every partition except one of its internal topic's (the
worker had two stages then): its committed offset stayed just before two members, Faust's
recovery had ended, the agent waited on its stream, and two groups were never scored — until
another rebalance, which does not come. The cause inside Faust is not pinned down; this watch
names such a partition in the log (with where Faust holds it) and hands it back to the
fetcher.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

P = TypeVar("P", bound=Hashable)


@dataclass(frozen=True)
class _Progress:
    committed: int | None
    since: float


class StallWatch(Generic[P]):
    """Pure: fed each owned partition's committed offset, log end and whether Faust fetches
    it, says which have been left behind — not fetched, records past the committed offset,
    and that offset unmoved for ``patience_s``."""

    def __init__(self, patience_s: float) -> None:
        self.patience_s = patience_s
        self._seen: dict[P, _Progress] = {}

    def stalled(
        self, partition: P, committed: int | None, end: int | None, fetched: bool, now: float
    ) -> bool:
        seen = self._seen.get(partition)
        behind = end is not None and (committed or 0) < end
        if fetched or not behind or seen is None or seen.committed != committed:
            self._seen[partition] = _Progress(committed, now)  # patience starts (again)
            return False
        return now - seen.since >= self.patience_s

    def keep_only(self, partitions: Iterable[P]) -> None:
        owned = set(partitions)
        for partition in set(self._seen) - owned:
            del self._seen[partition]
