"""A partition's writer when the broker refuses its producer's own state: it gives the
partition up to a new generation (a new producer) at once, never retries the same producer.
And the reader's wait on it: a backlog is read no faster than its groups are committed."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError, OutOfOrderSequenceNumber, UnknownProducerId

from streams.stage import group_writes
from streams.stage.group_scorer import Settlement
from streams.stage.group_writes import GroupWrites, Topics
from streams.stage.settled_groups import SettledMark
from tests.builders import T0, trajectory


class RefusingProducer:
    """Every transaction fails with ``error`` (aborts succeed)."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.transactions = 0
        self.aborts = 0
        self._txn_manager = self

    def is_in_transaction(self) -> bool:
        return True

    def is_fatal_error(self) -> bool:
        return False

    async def begin_transaction(self) -> None:
        self.transactions += 1

    async def send(self, *args: Any, **kwargs: Any) -> asyncio.Future[None]:
        failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        failed.set_exception(self.error)
        return failed

    async def abort_transaction(self) -> None:
        self.aborts += 1


class OnePartition:
    def writing(self, group: str) -> None: ...

    def written(self, group: str) -> None: ...

    def floor(self) -> int | None:
        return None


def settlement() -> Settlement:
    mark = SettledMark(False, frozenset({"r0"}), T0 + timedelta(seconds=9))
    return Settlement("g0", [], [], [], mark)


def writer_with(producer: object, on_failed: Any = None) -> GroupWrites:
    """Partition 0's writer through ``producer`` (a stand-in: a broker cannot be made to hold a
    commit or refuse a producer on cue)."""
    return GroupWrites(
        producer,  # type: ignore[arg-type]
        TopicPartition("forge.events", 0), "group", OnePartition(),  # type: ignore[arg-type]
        progress=None,  # type: ignore[arg-type]
        topics=Topics("forge.trajectories", "marks"), on_failed=on_failed,
    )  # fmt: skip


async def failures_after(error: Exception, wait_s: float) -> tuple[RefusingProducer, list[str]]:
    producer = RefusingProducer(error)
    failed: list[str] = []

    async def on_failed(writer: GroupWrites) -> None:
        failed.append(writer.events.topic)

    writer = writer_with(producer, on_failed)
    writer.add([settlement()])
    await asyncio.sleep(wait_s)
    return producer, failed


@pytest.mark.parametrize("error", [OutOfOrderSequenceNumber(), UnknownProducerId()])
async def test_a_producer_the_broker_refuses_is_given_up_at_once(error):
    producer, failed = await failures_after(error, 0.2)
    assert producer.transactions == 1 and failed == ["forge.events"]


async def test_the_broker_away_is_retried_with_the_same_producer(monkeypatch):
    monkeypatch.setattr(group_writes, "MIN_BACKOFF_S", 0.01)
    producer, failed = await failures_after(KafkaConnectionError(), 0.2)
    assert producer.transactions > 2 and producer.aborts == producer.transactions
    assert failed == []


class GatedProducer:
    """Each transaction commits once the test lets one through."""

    def __init__(self) -> None:
        self.gate: asyncio.Queue[None] = asyncio.Queue()
        self.commits = 0

    async def begin_transaction(self) -> None: ...

    async def send(self, *args: Any, **kwargs: Any) -> asyncio.Future[None]:
        sent: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        sent.set_result(None)
        return sent

    async def commit_transaction(self) -> None:
        await self.gate.get()
        self.commits += 1


def group_of(rollouts: int) -> Settlement:
    mark = SettledMark(False, frozenset({"r0"}), T0 + timedelta(seconds=9))
    return Settlement("g", [trajectory()] * rollouts, [], [], mark)


async def test_the_reader_waits_while_more_rollouts_than_the_limit_wait_for_a_transaction():
    producer = GatedProducer()
    writer = writer_with(producer)
    writer.add([group_of(4), group_of(4)])  # the first transaction takes these 8
    reader = asyncio.create_task(writer.wait_unwritten_below(5))
    await asyncio.sleep(0.05)
    writer.add([group_of(4)])  # read before the wait: the next transaction's
    assert not reader.done() and writer.unwritten_rollouts() == 12
    producer.gate.put_nowait(None)  # the first transaction commits
    await asyncio.wait_for(reader, 1.0)
    assert producer.commits == 1 and writer.unwritten_rollouts() == 4  # 4 ≤ 5: read on
    await asyncio.wait_for(writer.wait_unwritten_below(10), 0.1)  # under the limit: at once
    producer.gate.put_nowait(None)
    await asyncio.wait_for(writer.wait_unwritten_below(0), 1.0)
    assert producer.commits == 2 and writer.unwritten_rollouts() == 0


async def test_a_writer_that_fails_lets_the_reader_go():
    """Its rollouts are the next generation's to redo: waiting on them would hold the reader."""
    writer = writer_with(RefusingProducer(OutOfOrderSequenceNumber()))
    writer.add([group_of(4)])
    await asyncio.wait_for(writer.wait_unwritten_below(0), 1.0)
    assert writer.failed and writer.unwritten_rollouts() == 4
