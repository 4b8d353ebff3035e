"""The event log hands appends to the producer in rounds (a group commit): one alone goes at
once; those arriving while a round waits for its acknowledgements go together next, one batch
per partition; each caller is answered by its own batches' acknowledgements, a failed batch
failing only the callers whose events it held."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from aiokafka.errors import KafkaConnectionError, OutOfOrderSequenceNumber

from gateway.call import event_log
from gateway.call.event_log import EventLog
from gateway.errors import EventLogUnavailableError
from schemas import codec
from schemas.records import Envelope, ModelRequest
from tests.unit.streams.test_pipeline import rollout


class HeldBatch:
    """A batch builder of ``capacity`` bytes that, like aiokafka's, takes any one record when
    empty."""

    def __init__(self, capacity: int) -> None:
        self.keys: list[bytes] = []
        self.capacity = capacity
        self.size = 0

    def append(self, *, key: bytes, value: bytes, timestamp: None) -> object | None:
        if self.keys and self.size + len(key) + len(value) > self.capacity:
            return None
        self.keys.append(key)
        self.size += len(key) + len(value)
        return object()


class HeldProducer:
    """Records each batch sent (Kafka's unit of delivery: its records succeed or fail together);
    their acknowledgements come when the test says. Keys a, b (partition 0 of 4) and c (2)."""

    def __init__(self, capacity: int = 1 << 20) -> None:
        self.sent: list[tuple[int, list[bytes], asyncio.Future[Any]]] = []
        self.capacity = capacity
        self.refuse: set[int] = set()
        """Which batches to refuse, counted from 0 in the order they are handed over."""
        self.handed_over = 0
        self.started = asyncio.Event()
        self.may_start = asyncio.Event()
        self.stopped = False

    async def start(self) -> None:
        self.started.set()
        await self.may_start.wait()

    async def stop(self) -> None:
        self.stopped = True

    async def partitions_for(self, topic: str) -> set[int]:
        return {0, 1, 2, 3}

    def create_batch(self) -> HeldBatch:
        return HeldBatch(self.capacity)

    async def send_batch(self, batch: HeldBatch, topic: str, *, partition: int) -> Any:
        self.handed_over += 1
        if self.handed_over - 1 in self.refuse:
            raise KafkaConnectionError("buffer gone")
        ack: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.sent.append((partition, batch.keys, ack))
        return ack

    def keys(self) -> list[bytes]:
        return [key for _, keys, _ in self.sent for key in keys]

    def acknowledge(self, first: int = 0) -> None:
        for _, _, ack in self.sent[first:]:
            ack.set_result(None)


async def started_log(*renewals: HeldProducer) -> tuple[EventLog, HeldProducer]:
    """A started log over a held producer; ``renewals``: the producers it makes next, when it
    renews a broken one."""
    producer = HeldProducer()
    producer.may_start.set()
    made = iter([producer, *renewals])

    def new_producer() -> Any:
        return next(made)

    log = EventLog("unused:9092", "events", "queue", timeout_s=5, new_producer=new_producer)
    await log.start()
    return log, producer


def calls(*groups: str) -> list[tuple[str, list[Envelope]]]:
    """A rollout of each group and its first two events: what one append of a call carries
    (the group id is the records' key)."""
    return [(g, rollout(f"rollout-of-{g}", g, 1, 0, 0.0, 1.0)[:2]) for g in groups]


async def test_appends_arriving_during_a_round_go_together_in_the_next():
    log, producer = await started_log()
    a, b, c = calls("a", "b", "c")
    first = asyncio.create_task(log.append(*a))
    await asyncio.sleep(0.01)
    assert producer.keys() == [b"a", b"a"]  # alone: handed over at once
    later = [asyncio.create_task(log.append(*x)) for x in (b, c)]
    await asyncio.sleep(0.01)
    assert producer.keys() == [b"a", b"a"]  # waiting for the round in flight
    producer.acknowledge()
    await first
    await asyncio.sleep(0.01)
    # the next round: both together, one batch per partition, a rollout's events in order
    assert [(p, keys) for p, keys, _ in producer.sent[1:]] == [(0, [b"b", b"b"]), (2, [b"c", b"c"])]
    producer.sent[1][2].set_exception(KafkaConnectionError("lost"))
    producer.sent[2][2].set_result(None)
    with pytest.raises(EventLogUnavailableError):
        await later[0]
    await later[1]  # a failed batch of another partition is not its failure


async def test_a_full_batch_is_sent_at_once_and_answers_only_its_own_calls():
    log, producer = await started_log()
    producer.capacity = sum(len(b"a") + len(codec.encode(e)) for e in calls("a")[0][1])
    a, b, d = calls("a", "b", "a")  # all on partition 0
    first = asyncio.create_task(log.append(*a))
    await asyncio.sleep(0.01)
    second, third = asyncio.create_task(log.append(*b)), asyncio.create_task(log.append(*d))
    producer.acknowledge()
    await first
    await asyncio.sleep(0.01)
    assert [keys for _, keys, _ in producer.sent[1:]] == [[b"b", b"b"], [b"a", b"a"]]
    producer.sent[1][2].set_result(None)
    await second
    assert not third.done()  # its own batch is not acknowledged yet
    producer.sent[2][2].set_result(None)
    await third


async def test_an_append_whose_caller_stopped_waiting_is_not_sent_in_the_next_round():
    log, producer = await started_log()
    a, b, c = calls("a", "b", "c")
    first = asyncio.create_task(log.append(*a))
    await asyncio.sleep(0.01)
    gone, kept = asyncio.create_task(log.append(*b)), asyncio.create_task(log.append(*c))
    await asyncio.sleep(0.01)
    gone.cancel()  # e.g. the agent disconnected while its call waited for the next round
    producer.acknowledge()
    await first
    await asyncio.sleep(0.01)
    assert producer.keys()[2:] == [b"c", b"c"]
    producer.acknowledge(1)
    await kept


async def test_an_append_unacknowledged_in_time_is_answered_503_and_not_sent_later():
    log, producer = await started_log()
    log.timeout_s = 0.05
    a, b, c = calls("a", "b", "c")
    first = asyncio.create_task(log.append(*a))
    await asyncio.sleep(0.01)
    waiting = asyncio.create_task(log.append(*b))  # for the round in flight, which never ends
    for call in (first, waiting):
        with pytest.raises(EventLogUnavailableError):
            await call
    log.timeout_s = 5
    producer.acknowledge()  # the first round's acknowledgement comes, too late
    third = asyncio.create_task(log.append(*c))
    await asyncio.sleep(0.01)
    assert producer.keys() == [b"a", b"a", b"c", b"c"]  # b, answered 503, was never handed over
    producer.acknowledge(1)
    await third


async def test_a_cancelled_delivery_is_answered_503_not_as_a_cancellation():
    log, producer = await started_log()
    (a,) = calls("a")
    call = asyncio.create_task(log.append(*a))
    await asyncio.sleep(0.01)
    producer.sent[0][2].cancel()
    with pytest.raises(EventLogUnavailableError):
        await call


async def test_an_append_of_nothing_is_answered_at_once():
    log, producer = await started_log()
    await asyncio.wait_for(log.append("g", []), 1)
    assert producer.sent == []


async def test_a_batch_the_producer_refuses_fails_its_calls_and_the_round_goes_on():
    log, producer = await started_log()
    a, b, c = calls("a", "b", "c")
    first = asyncio.create_task(log.append(*a))
    await asyncio.sleep(0.01)
    producer.refuse = {1}  # the next round's first batch (partition 0: b) is refused
    refused, other = asyncio.create_task(log.append(*b)), asyncio.create_task(log.append(*c))
    producer.acknowledge()
    await first
    with pytest.raises(EventLogUnavailableError):
        await refused
    assert producer.keys()[2:] == [b"c", b"c"]  # partition 2's batch was still handed over
    producer.acknowledge(1)
    await other


async def test_a_call_whose_later_batch_is_refused_fails_and_its_sent_batch_is_waited_for():
    log, producer = await started_log()
    producer.capacity = 1  # one record a batch: the call's two events go in two batches
    producer.refuse = {1}  # the call's second batch
    a, b = calls("a", "b")
    first = asyncio.create_task(log.append(*a))
    await asyncio.sleep(0.01)
    assert [keys for _, keys, _ in producer.sent] == [[b"a"]]  # its first batch went
    with pytest.raises(EventLogUnavailableError):
        await first
    second = asyncio.create_task(log.append(*b))
    await asyncio.sleep(0.01)
    assert producer.keys() == [b"a"]  # the round waits for what it did send of the failed call
    producer.acknowledge()
    await asyncio.sleep(0.01)
    producer.acknowledge(1)
    await second
    assert producer.keys() == [b"a", b"b", b"b"]


async def test_an_event_over_the_size_limit_fails_its_call_alone(monkeypatch):
    monkeypatch.setattr(event_log, "MAX_MESSAGE_BYTES", 2_000)
    log, producer = await started_log()
    a, big, c = calls("a", "b", "c")
    request = big[1][1].payload
    assert isinstance(request, ModelRequest)  # the call's second event, its first is small
    big[1][1] = replace(
        big[1][1], payload=replace(request, prompt_token_ids=np.zeros(1_000, np.int32))
    )
    first = asyncio.create_task(log.append(*a))
    await asyncio.sleep(0.01)
    refused, other = asyncio.create_task(log.append(*big)), asyncio.create_task(log.append(*c))
    producer.acknowledge()
    await first
    with pytest.raises(EventLogUnavailableError):
        await refused
    assert producer.keys()[2:] == [b"c", b"c"]  # nothing of the refused call was handed over
    producer.acknowledge(1)
    await other


async def test_a_renewed_producer_takes_sends_only_once_it_has_started():
    fresh = HeldProducer()
    log, old = await started_log(fresh)
    renewal = asyncio.create_task(log._renew_if_broken(OutOfOrderSequenceNumber()))
    await fresh.started.wait()
    assert log.producer is old  # a round meanwhile sends to the old one (and gets 503s)
    fresh.may_start.set()
    await renewal
    assert log.producer is fresh and old.stopped


async def test_a_renewed_producer_that_does_not_start_leaves_the_old_one_in_place():
    fresh = HeldProducer()

    async def refuse() -> None:
        raise KafkaConnectionError("broker away")

    fresh.start = refuse  # type: ignore[method-assign]
    log, old = await started_log(fresh)
    await log._renew_if_broken(OutOfOrderSequenceNumber())
    assert log.producer is old and fresh.stopped and not old.stopped
