"""What the worker remembers of the groups it settled: one mark per group (its members, by
rollout id), kept in a compacted topic partitioned as forge.events.

A group's members live only in memory until it settles (``streams.stage.group_scorer``). Its mark is
written in the same transaction as its trajectories and the partition's floor
(``streams.stage.group_writes``); from then on the mark alone turns away what still arrives for it —
a copy of a member (the partition read again after a restart) or a member that ended after the
group's timeout — whether this worker or the partition's next owner (it loads the partition's
marks before reading the partition) sees it.

Marks are forgotten (a tombstone in the topic) once the horizon is ``keep`` past the group's
deadline: by then no member can still arrive — a rollout open that long is given up
(``streams.stage.open_rollouts``), and so a restart never reads further back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from aiokafka import TopicPartition

from infra.kafka_clients import async_consumer


@dataclass(frozen=True)
class SettledMark:
    timed_out: bool
    rollouts: frozenset[str]
    """Every member it settled: scored, late or rejected."""
    deadline: datetime

    def encode(self) -> bytes:
        return json.dumps(
            [self.timed_out, sorted(self.rollouts), self.deadline.isoformat()]
        ).encode()

    @classmethod
    def decode(cls, raw: bytes) -> SettledMark:
        """The mark ``raw`` holds; ValueError for anything else."""
        try:
            timed_out, rollouts, deadline = json.loads(raw)
            mark = cls(timed_out, frozenset(rollouts), datetime.fromisoformat(deadline))
        except (TypeError, ValueError) as error:  # JSON, shape, element types, the timestamp
            raise ValueError(f"not a settled-group mark: {error}") from None
        if not isinstance(timed_out, bool) or not all(isinstance(r, str) for r in rollouts):
            raise ValueError("not a settled-group mark: wrong field types")
        if mark.deadline.tzinfo is None:
            raise ValueError("not a settled-group mark: a deadline without a time zone")
        return mark


class SettledGroups:
    """One forge.events partition's marks, by group id."""

    def __init__(self, keep: timedelta) -> None:
        self.keep = keep
        self._marks: dict[str, SettledMark] = {}

    def load(self, records: Iterable[MarkRecord]) -> list[tuple[MarkRecord, str]]:
        """Apply the partition's log in order (a tombstone forgets its group); the records
        that are no mark come back with the reason, for the dead letters."""
        bad = []
        for record in records:
            try:
                group = _group_of(record.key)
                if record.value is None:
                    self._marks.pop(group, None)
                else:
                    self._marks[group] = SettledMark.decode(record.value)
            except ValueError as error:
                bad.append((record, str(error)))
        return bad

    def __len__(self) -> int:
        return len(self._marks)

    def get(self, group: str) -> SettledMark | None:
        return self._marks.get(group)

    def add(self, group: str, mark: SettledMark) -> None:
        self._marks[group] = mark

    def prune(self, horizon: datetime) -> list[str]:
        """Forget the marks ``keep`` past their deadline at ``horizon``; their groups."""
        gone = [g for g, mark in self._marks.items() if horizon - mark.deadline > self.keep]
        for group in gone:
            del self._marks[group]
        return gone


def _group_of(key: bytes | None) -> str:
    if key is None:
        raise ValueError("a settled-group mark without a key")
    try:
        return key.decode()
    except UnicodeDecodeError:
        raise ValueError("a settled-group mark whose key is no group id") from None


@dataclass(frozen=True)
class MarkRecord:
    offset: int
    key: bytes | None
    value: bytes | None


async def read_marks(bootstrap: str, topic: str, partition: int) -> list[MarkRecord]:
    """The partition's log as it is now, in order (committed records only). Read as the worker
    takes the partition over, before its first record: a fetch waiting the default 500 ms
    for new records held the seek and the end behind it, and a backlog idle 0.5 s a
    partition."""
    consumer = async_consumer(bootstrap, enable_auto_commit=False, fetch_max_wait_ms=10)
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        found: list[MarkRecord] = []
        while await consumer.position(tp) < end:
            for records in (await consumer.getmany(tp, timeout_ms=1000)).values():
                found.extend(
                    MarkRecord(r.offset, r.key, r.value) for r in records if r.offset < end
                )
        return found
    finally:
        await consumer.stop()
