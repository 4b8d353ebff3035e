"""The event log hands appends to the producer in rounds (a group commit): one alone goes at
once; those arriving while a round waits for its acknowledgements go together next; each
caller is answered by its own acknowledgements, a failed one failing only its caller."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError, OutOfOrderSequenceNumber

from gateway.errors import EventLogUnavailableError
from gateway.event_log import EventLog
from tests.unit.streams.test_pipeline import rollout


class HeldProducer:
    """Records each send; its acknowledgements come when the test says."""

    def __init__(self, refuse_after: int | None = None) -> None:
        self.sent: list[tuple[bytes, asyncio.Future[Any]]] = []
        self.refuse_after = refuse_after
        self.started = asyncio.Event()
        self.may_start = asyncio.Event()
        self.stopped = False

    async def start(self) -> None:
        self.started.set()
        await self.may_start.wait()

    async def stop(self) -> None:
        self.stopped = True

    async def send(self, topic: str, value: bytes, key: bytes) -> asyncio.Future[Any]:
        if self.refuse_after is not None and len(self.sent) >= self.refuse_after:
            raise KafkaConnectionError("buffer gone")
        ack: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.sent.append((key, ack))
        return ack

    def keys(self) -> list[bytes]:
        return [key for key, _ in self.sent]


async def started_log() -> tuple[EventLog, HeldProducer]:
    log = EventLog("unused:9092", "events", "queue", timeout_s=5)
    producer = HeldProducer()
    log._new_producer = lambda: producer  # type: ignore[method-assign,assignment,return-value]
    log.producer = producer  # type: ignore[assignment]
    log._renewing = False
    log._gathering, log._rounds = [], None
    return log, producer


async def test_appends_arriving_during_a_round_go_together_in_the_next():
    log, producer = await started_log()
    a, b, c = (rollout(r, "g", 1, 0, 0.0, 1.0)[:2] for r in "abc")
    first = asyncio.create_task(log.append(a))
    await asyncio.sleep(0.01)
    assert producer.keys() == [b"a", b"a"]  # alone: handed over at once
    later = [asyncio.create_task(log.append(x)) for x in (b, c)]
    await asyncio.sleep(0.01)
    assert producer.keys() == [b"a", b"a"]  # waiting for the round in flight
    for _, ack in producer.sent:
        ack.set_result(None)
    await first
    await asyncio.sleep(0.01)
    assert producer.keys()[2:] == [b"b", b"b", b"c", b"c"]  # the next round: both together
    for key, ack in producer.sent[2:]:
        if key == b"b":
            ack.set_exception(KafkaConnectionError("lost"))
        else:
            ack.set_result(None)
    with pytest.raises(EventLogUnavailableError):
        await later[0]
    await later[1]  # its neighbour's failure is not its own


async def test_an_append_whose_caller_stopped_waiting_is_not_sent_in_the_next_round():
    log, producer = await started_log()
    a, b, c = (rollout(r, "g", 1, 0, 0.0, 1.0)[:2] for r in "abc")
    first = asyncio.create_task(log.append(a))
    await asyncio.sleep(0.01)
    gone, kept = asyncio.create_task(log.append(b)), asyncio.create_task(log.append(c))
    await asyncio.sleep(0.01)
    gone.cancel()  # e.g. the agent disconnected while its call waited for the next round
    for _, ack in producer.sent:
        ack.set_result(None)
    await first
    await asyncio.sleep(0.01)
    assert producer.keys()[2:] == [b"c", b"c"]
    for _, ack in producer.sent[2:]:
        ack.set_result(None)
    await kept


async def test_an_append_unacknowledged_in_time_is_answered_503_and_not_sent_later():
    log, producer = await started_log()
    log.timeout_s = 0.05
    a, b, c = (rollout(r, "g", 1, 0, 0.0, 1.0)[:2] for r in "abc")
    first = asyncio.create_task(log.append(a))
    await asyncio.sleep(0.01)
    waiting = asyncio.create_task(log.append(b))  # for the round in flight, which never ends
    for call in (first, waiting):
        with pytest.raises(EventLogUnavailableError):
            await call
    log.timeout_s = 5
    for _, ack in producer.sent:  # the first round's acknowledgements come, too late
        ack.set_result(None)
    third = asyncio.create_task(log.append(c))
    await asyncio.sleep(0.01)
    assert producer.keys() == [b"a", b"a", b"c", b"c"]  # b, answered 503, was never handed over
    for _, ack in producer.sent[2:]:
        ack.set_result(None)
    await third


async def test_a_cancelled_delivery_is_answered_503_not_as_a_cancellation():
    log, producer = await started_log()
    call = asyncio.create_task(log.append(rollout("a", "g", 1, 0, 0.0, 1.0)[:2]))
    await asyncio.sleep(0.01)
    producer.sent[0][1].cancel()
    with pytest.raises(EventLogUnavailableError):
        await call


async def test_an_append_of_nothing_is_answered_at_once():
    log, producer = await started_log()
    await asyncio.wait_for(log.append([]), 1)
    assert producer.sent == []


async def test_a_send_refused_midway_fails_its_caller_and_what_was_sent_is_still_waited_for():
    log, producer = await started_log()
    producer.refuse_after = 1  # the first call's second event is refused
    a, b = (rollout(r, "g", 1, 0, 0.0, 1.0)[:2] for r in "ab")
    first = asyncio.create_task(log.append(a))
    await asyncio.sleep(0.01)
    with pytest.raises(EventLogUnavailableError):
        await first
    producer.refuse_after = None
    second = asyncio.create_task(log.append(b))
    await asyncio.sleep(0.01)
    assert producer.keys() == [b"a"]  # the round waits for what it did send of the failed call
    producer.sent[0][1].set_result(None)
    await asyncio.sleep(0.01)
    for _, ack in producer.sent[1:]:
        ack.set_result(None)
    await second
    assert producer.keys() == [b"a", b"b", b"b"]


async def test_a_renewed_producer_takes_sends_only_once_it_has_started():
    log, old = await started_log()
    fresh = HeldProducer()
    log._new_producer = lambda: fresh  # type: ignore[method-assign,assignment,return-value]
    renewal = asyncio.create_task(log._renew_if_broken(OutOfOrderSequenceNumber()))
    await fresh.started.wait()
    assert log.producer is old  # a round meanwhile sends to the old one (and gets 503s)
    fresh.may_start.set()
    await renewal
    assert log.producer is fresh and old.stopped


async def test_a_renewed_producer_that_does_not_start_leaves_the_old_one_in_place():
    log, old = await started_log()
    fresh = HeldProducer()

    async def refuse() -> None:
        raise KafkaConnectionError("broker away")

    fresh.start = refuse  # type: ignore[method-assign]
    log._new_producer = lambda: fresh  # type: ignore[method-assign,assignment,return-value]
    await log._renew_if_broken(OutOfOrderSequenceNumber())
    assert log.producer is old and fresh.stopped and not old.stopped
