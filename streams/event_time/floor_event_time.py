"""The newest event time below a forge.events partition's floor, committed with it (pure).

A record below the committed floor is done: whatever it started has ended and its group's
outputs are committed. A next owner reads the partition again only from the floor, so the event
time of the records before it comes with the commit (``streams.stage.group_writes``) and is read
back at the takeover (``streams.stage.owned_partitions``). Not the newest event processed: a record
above the floor may end a rollout whose group is not committed yet, and a horizon that started past
it could time that group out before the next owner reads the record again.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import datetime

BUCKET_RECORDS = 256
"""Records summed up in one entry above the floor: memory stays a few entries per thousand
records held, and the event time below the floor lags by up to a bucket (never leads)."""


@dataclass
class _Bucket:
    last_offset: int
    newest: datetime
    records: int = 1


class FloorEventTime:
    def __init__(self, bucket_records: int = BUCKET_RECORDS) -> None:
        self._bucket_records = bucket_records
        self._below: datetime | None = None
        self._above: deque[_Bucket] = deque()
        """Processed records with an event time not yet known to be below the floor, in offset
        order."""

    def seed(self, committed: datetime | None) -> None:
        """The event time the floor was committed with before: below it, whatever it is now."""
        self._below = _later(self._below, committed)

    def processed(self, offset: int, ts: datetime) -> None:
        """Records are processed in offset order."""
        last = self._above[-1] if self._above else None
        if last is not None and last.records < self._bucket_records:
            last.last_offset = offset
            last.newest = max(last.newest, ts)
            last.records += 1
        else:
            self._above.append(_Bucket(offset, ts))

    def below(self, floor: int) -> datetime | None:
        """The newest event time of the records before offset ``floor`` (a bucket counts once
        the floor has passed its last record); floors only rise."""
        while self._above and self._above[0].last_offset < floor:
            self._below = _later(self._below, self._above.popleft().newest)
        return self._below


def _later(a: datetime | None, b: datetime | None) -> datetime | None:
    if a is None:
        return b
    return a if b is None or a >= b else b
