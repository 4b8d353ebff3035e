"""The event time group timeouts are judged at, one horizon across every forge.events partition
and every worker of the group (pure).

A group may time out only once no member that ended before its deadline can still be on its
way. Every member is on its group's partition, read by the worker that scores the group, but
the replay times groups out at the newest event of the whole log, so the horizon is a
watermark across partitions, as in Flink: every ``group_check_s`` each worker writes, for every
forge.events partition it owns, a ``Watermark`` — all of a round in one record — to the
worker's watermark topic (one partition: its log order is the order the rounds were written),
and every worker reads that topic whole, in order. A mark counts the records below
``counted``; the worker that owns a partition judges its groups only once it has processed
every record the marks of that partition it has read count (``SharedHorizon.counted``): a
previous owner's marks count records a new owner reads again.

A partition still being worked through bounds the horizon at its newest event minus the
lateness. A caught-up one certifies everything appended before its check; a reader knows event
time reached at least the newest it had read from any partition before that partition's
previous watermark (its round written before the check), so it bounds the horizon there
minus the lateness — an owner that falls silent (stopped, killed) holds the horizon where its
last word left it. When every partition is caught up and quiet the lateness is dropped: the
horizon is the newest event itself, a replay's end of the log, so live and replay time out
the same groups.

A new owner of an events partition (after a rebalance or a restart) reads it again only from
its committed floor, so the newest event time before that comes with the floor's commit
(``streams.event_time.floor_event_time``): without it, a generation that committed the whole log
before any watermark was written left the next one no event time, and the horizon unknown for good.

Only this process's monotonic clock is used (for "quiet"), never compared with event time: a
producer clock far off ours changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from streams.event_time.floor_event_time import FloorEventTime


def _event_time(value: datetime, what: str) -> datetime:
    """``value`` if it can be an event time: aware, and not before the epoch (the horizon
    takes the lateness away from it; near datetime's first year that overflows)."""
    if value.tzinfo is None:
        raise ValueError(f"{what} without a time zone")
    if value.year < 1970:
        raise ValueError(f"{what} before the epoch")
    return value


@dataclass(frozen=True)
class Watermark:
    """Partition ``partition`` of forge.events, as its owner has processed it."""

    partition: int
    newest: datetime | None
    """The newest event time processed on the partition, by this owner or (as its committed
    floor says) an earlier one; None: none known."""
    caught_up: bool
    """Everything in the partition when this was sent has been processed."""
    quiet: bool
    """Caught up, and no event for the idle period."""
    counted: int = 0
    """The records below this offset are processed (those below the floor by an earlier
    owner)."""

    def encode(self) -> bytes:
        newest = "" if self.newest is None else self.newest.isoformat()
        flags = f"{int(self.caught_up)}|{int(self.quiet)}"
        return f"{self.partition}|{newest}|{flags}|{self.counted}".encode()

    @classmethod
    def decode(cls, raw: bytes) -> Watermark:
        """ValueError for anything but a watermark (a timestamp without a zone included)."""
        partition, newest, caught_up, quiet, counted = raw.decode().split("|")
        mark = cls(
            int(partition),
            datetime.fromisoformat(newest) if newest else None,
            caught_up == "1",
            quiet == "1",
            int(counted),
        )
        if mark.newest is not None:
            _event_time(mark.newest, "a watermark's event time")
        if mark.partition < 0 or mark.counted < 0:
            raise ValueError("a watermark of a negative partition or offset")
        return mark


def encode_round(marks: list[Watermark]) -> bytes:
    """One worker's round: its marks in one record, so readers take them together."""
    return b"\n".join(mark.encode() for mark in marks)


def decode_round(raw: bytes) -> list[Watermark]:
    """ValueError for anything but a round of watermarks."""
    return [Watermark.decode(line) for line in raw.split(b"\n")]


def newest_metadata(newest: datetime | None) -> str:
    """What an events floor is committed with: the newest event time of the records below it
    (``streams.event_time.floor_event_time``)."""
    return "" if newest is None else newest.isoformat()


def newest_of_metadata(raw: str) -> datetime | None:
    """The event time an events floor was committed with; None for none (or anything else: an
    older worker committed no metadata)."""
    try:
        return _event_time(datetime.fromisoformat(raw), "a floor's event time") if raw else None
    except ValueError:
        return None


@dataclass
class _Progress:
    next_offset: int | None = None
    newest: datetime | None = None
    last_event_at: float | None = None
    floor_time: FloorEventTime = field(default_factory=FloorEventTime)


class EventsProgress:
    """The sender's side: how far this worker has processed each forge.events partition."""

    def __init__(self, idle_s: float) -> None:
        self.idle_s = idle_s
        self._partitions: dict[int, _Progress] = {}

    def processed(self, partition: int, offset: int, ts: datetime | None, now: float) -> None:
        """The record at ``offset`` is handled; ``ts`` None for a record that went to the
        dead letters."""
        progress = self._partitions.setdefault(partition, _Progress())
        progress.next_offset = offset + 1
        progress.last_event_at = now
        if ts is not None:
            progress.floor_time.processed(offset, ts)
            if progress.newest is None or ts > progress.newest:
                progress.newest = ts

    def seed(self, partition: int, floor: int, committed: datetime | None) -> None:
        """The records below ``floor`` were done before this generation, and event time had
        reached ``committed`` on the partition by then: what its floor was committed with
        (``streams.event_time.floor_event_time``). Given before the partition's first record is
        processed here, so no watermark or floor commit says less than an earlier owner
        knew."""
        progress = self._partitions.setdefault(partition, _Progress())
        if progress.next_offset is None or floor > progress.next_offset:
            progress.next_offset = floor
        progress.floor_time.seed(committed)
        if committed is not None and (progress.newest is None or committed > progress.newest):
            progress.newest = committed

    def below_floor(self, partition: int, floor: int) -> datetime | None:
        """The event time to commit the partition's floor ``floor`` with."""
        return self._partitions.setdefault(partition, _Progress()).floor_time.below(floor)

    def keep_only(self, partitions: set[int]) -> None:
        """Forget partitions this worker no longer owns: a new owner starts afresh."""
        for partition in set(self._partitions) - partitions:
            del self._partitions[partition]

    def mark(self, partition: int, log_end: int | None, now: float) -> Watermark:
        """``log_end``: the partition's high watermark, asked of the broker now. Caught up
        only once every record below it is processed (fetched is not processed: a record in
        the stream's buffer may end a group's member), the floor the partition was taken over
        at counting as processed. forge.events is written without transactions, so its last
        record is just below its end."""
        progress = self._partitions.setdefault(partition, _Progress())
        caught_up = (
            progress.next_offset is not None and log_end is not None
            and progress.next_offset >= log_end
        )  # fmt: skip
        quiet = caught_up and (
            progress.last_event_at is None or now - progress.last_event_at >= self.idle_s
        )
        return Watermark(partition, progress.newest, caught_up, quiet, progress.next_offset or 0)

    def counted(self, partition: int) -> int:
        """The records of ``partition`` below this offset are processed: by this generation,
        or (below the floor it started from) an earlier one."""
        found = self._partitions.get(partition)
        return 0 if found is None or found.next_offset is None else found.next_offset


@dataclass
class SharedHorizon:
    """The reader's side: a worker's view of every forge.events partition, from the
    watermarks it has read, in log order."""

    lateness: timedelta
    _marks: dict[int, Watermark] = field(default_factory=dict)
    _newest: datetime | None = None
    """The newest event time any watermark read so far carried."""
    _at_mark: dict[int, datetime | None] = field(default_factory=dict)
    """``_newest`` when each partition's latest watermark was read."""
    _certified: dict[int, datetime | None] = field(default_factory=dict)
    """``_newest`` when each partition's previous watermark was read: its caught-up claim
    covers event time up to there."""
    _counted: dict[int, int] = field(default_factory=dict)
    """The most any mark of each partition counted."""

    @property
    def newest(self) -> datetime | None:
        return self._newest

    def read_round(self, *marks: Watermark) -> None:
        """One worker's round of marks, read together: the newest time any of them carries
        counts as known at each, since the whole round was written before that worker's next
        checks (a round's first partition needs no round more than its last)."""
        for mark in marks:
            if mark.newest is not None and (self._newest is None or mark.newest > self._newest):
                self._newest = mark.newest
        for mark in marks:
            self._certified[mark.partition] = self._at_mark.get(mark.partition)
            self._counted[mark.partition] = max(self._counted.get(mark.partition, 0), mark.counted)
            self._at_mark[mark.partition] = self._newest
            self._marks[mark.partition] = mark

    def counted(self, partition: int) -> int:
        """The records of ``partition`` the marks read so far count: its owner judges its
        groups at this horizon only once it has processed them all."""
        return self._counted.get(partition, 0)

    def horizon(self, partitions: int) -> datetime | None:
        """The event time groups may be settled at, forge.events having ``partitions``; None
        while any of them is unknown."""
        reached: list[datetime] = []
        for partition in range(partitions):
            mark = self._marks.get(partition)
            if mark is None:
                return None
            covered = mark.newest if not mark.caught_up else self._certified[partition]
            if covered is None:
                return None
            reached.append(covered)
        if not reached:
            return None
        if all(self._marks[p].quiet for p in range(partitions)):
            return min(reached)
        return min(reached) - self.lateness

    def all_quiet(self, partitions: int) -> bool:
        """Every one of the ``partitions`` of forge.events caught up and quiet, the horizon at
        the newest event: without a new event it cannot move again."""
        return self._newest is not None and all(
            (mark := self._marks.get(p)) is not None
            and mark.quiet
            and self._certified.get(p) == self._newest
            for p in range(partitions)
        )
