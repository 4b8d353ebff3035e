"""A partition's writer when the broker refuses its producer's own state: it gives the
partition up to a new generation (a new producer) at once, never retries the same producer."""

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
from tests.builders import T0


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


async def failures_after(error: Exception, wait_s: float) -> tuple[RefusingProducer, list[str]]:
    producer = RefusingProducer(error)
    failed: list[str] = []

    async def on_failed(writer: GroupWrites) -> None:
        failed.append(writer.events.topic)

    writer = GroupWrites(
        producer,  # type: ignore[arg-type]
        TopicPartition("forge.events", 0), "group", OnePartition(),  # type: ignore[arg-type]
        progress=None,  # type: ignore[arg-type]
        topics=Topics("forge.trajectories", "marks"), on_failed=on_failed,
    )  # fmt: skip
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
