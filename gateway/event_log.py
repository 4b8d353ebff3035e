"""Appending the gateway's events to Kafka: durable (acks=all, idempotent) before any reply."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    InvalidProducerEpoch,
    KafkaError,
    OutOfOrderSequenceNumber,
    UnknownProducerId,
)

from gateway.errors import EventLogUnavailableError
from infra.kafka_clients import durable_producer
from schemas import codec
from schemas.records import Envelope, QueueEntry

log = logging.getLogger(__name__)
BROKEN_PRODUCER = (OutOfOrderSequenceNumber, UnknownProducerId, InvalidProducerEpoch)
UNAVAILABLE = "the event log is unavailable: nothing of this request was recorded; retry later"


class EventSink(Protocol):
    """Where the gateway's events go: Kafka in production, a list in unit tests."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def enqueue(self, entry: QueueEntry) -> int: ...

    async def append(self, envelopes: Sequence[Envelope]) -> None: ...


class EventLog:
    def __init__(
        self, bootstrap: str, events_topic: str, queue_topic: str, *, timeout_s: float
    ) -> None:
        self.events_topic = events_topic
        self.queue_topic = queue_topic
        self.timeout_s = timeout_s
        self.bootstrap = bootstrap

    def _new_producer(self) -> AIOKafkaProducer:
        return durable_producer(
            self.bootstrap,
            linger_ms=0,
            request_timeout_ms=int(self.timeout_s * 1000),
            client_id="forge-gateway",
        )

    async def start(self) -> None:
        """Connect; aiokafka binds its producer to the running event loop, so it is made here."""
        self.producer: AIOKafkaProducer = self._new_producer()
        self._renewing = False
        self._gathering: list[tuple[Sequence[Envelope], asyncio.Future[None]]] = []
        self._rounds: asyncio.Task[None] | None = None
        try:
            await asyncio.wait_for(self.producer.start(), self.timeout_s)
        except (KafkaError, OSError, TimeoutError) as exc:
            await self.producer.stop()
            raise EventLogUnavailableError(f"Kafka unreachable at start-up: {exc!r}") from exc

    async def close(self) -> None:
        """Bounded: with Kafka gone, aiokafka keeps retrying sends whose callers were already
        answered 503 (nothing acknowledged is pending), and shutdown would wait on them."""
        try:
            await asyncio.wait_for(self.producer.stop(), self.timeout_s)
        except TimeoutError:
            log.warning("Kafka unreachable at shutdown: unacknowledged sends dropped")

    async def enqueue(self, entry: QueueEntry) -> int:
        """Store a generation-queue entry; its offset is the rollout's queue index.

        On a timeout the send may still land later (the producer retries): the error carries
        the pending delivery so the caller can resolve that queue index once it is known."""
        try:
            sent = await self.producer.send(
                self.queue_topic, codec.encode(entry), key=entry.rollout_id.encode()
            )
        except (KafkaError, OSError) as exc:
            log.warning("queue entry for %s not sent: %r", entry.rollout_id, exc)
            raise EventLogUnavailableError(UNAVAILABLE) from exc
        try:
            metadata = await asyncio.wait_for(asyncio.shield(sent), self.timeout_s)
        except (KafkaError, TimeoutError, OSError) as exc:
            log.warning("queue entry for %s not acknowledged: %r", entry.rollout_id, exc)
            await self._renew_if_broken(exc)
            raise EventLogUnavailableError(UNAVAILABLE, pending=sent) from exc
        return int(metadata.offset)

    async def append(self, envelopes: Sequence[Envelope]) -> None:
        """Store events (all of one rollout) or raise; returns once all are acknowledged.

        The whole of it is bounded: a full producer buffer waits inside ``send`` too. Appends
        are handed to the producer in rounds: one alone goes at once, and those that arrive
        while a round waits for its acknowledgements go together in the next (a group
        commit): under load a produce request carries many calls' events, not one call's,
        and nobody waits for a linger."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        # A timer on `done` itself (cheaper than a timeout scope per call): once `done` is
        # failed, or cancelled with its caller, a round skips it.
        deadline = loop.call_later(self.timeout_s, _expire, done)
        self._gathering.append((envelopes, done))
        if self._rounds is None or self._rounds.done():
            self._rounds = asyncio.create_task(self._send_rounds(), name="event-log-rounds")
        try:
            await done
        except (KafkaError, TimeoutError, OSError) as exc:
            log.warning("events of %s not acknowledged: %r", envelopes[0].rollout_id, exc)
            await self._renew_if_broken(exc)
            raise EventLogUnavailableError(UNAVAILABLE) from exc
        finally:
            deadline.cancel()

    async def _send_rounds(self) -> None:
        """Each round's sends are made here, one after another in arrival order, and answered
        by callbacks on their deliveries: no task or gather per call."""
        while self._gathering:
            batch, self._gathering = self._gathering, []
            deliveries: list[asyncio.Future[Any]] = []
            for envelopes, done in batch:
                if done.done():  # its caller stopped waiting (timed out, or gone)
                    continue
                sent: list[asyncio.Future[Any]] = []
                try:
                    for env in envelopes:
                        key = env.rollout_id.encode()
                        sent.append(
                            await self.producer.send(self.events_topic, codec.encode(env), key=key)
                        )
                except Exception as exc:  # handed to the appender, never lost in this task
                    if not done.done():
                        done.set_exception(exc)
                _answer_when_delivered(sent, done)  # those sent before a failure: waited for too
                deliveries.extend(sent)
            if deliveries:
                await asyncio.wait(deliveries)

    async def _renew_if_broken(self, exc: BaseException) -> None:
        """After a broker restart the idempotent producer's sequence numbers can have a gap the
        broker refuses for good (OutOfOrderSequenceNumber on every send): only a new producer,
        with a new producer id, gets through. Its callers are answered 503 meanwhile."""
        if not isinstance(exc, BROKEN_PRODUCER) or self._renewing:
            return
        self._renewing = True
        fresh = self._new_producer()
        try:
            log.warning("Kafka refused the producer's state (%r): starting a new producer", exc)
            await asyncio.wait_for(fresh.start(), self.timeout_s)
        except (KafkaError, OSError, TimeoutError) as start_failed:
            log.warning("the new producer could not start yet: %r", start_failed)
            await self._stop(fresh)
        else:  # only a started producer takes sends: one that never starts would hold a round
            old, self.producer = self.producer, fresh
            await self._stop(old)
        finally:
            self._renewing = False

    async def _stop(self, producer: AIOKafkaProducer) -> None:
        try:
            await asyncio.wait_for(producer.stop(), self.timeout_s)
        except (KafkaError, OSError, TimeoutError):
            log.warning("an old producer did not stop cleanly")


def _expire(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_exception(TimeoutError("no acknowledgement in time"))


def _answer_when_delivered(sent: Sequence[asyncio.Future[Any]], done: asyncio.Future[None]) -> None:
    """``done`` gets the first failure among ``sent``, else its result once all are delivered."""
    remaining = len(sent)
    if remaining == 0 and not done.done():
        done.set_result(None)

    def delivered(future: asyncio.Future[Any]) -> None:
        nonlocal remaining
        remaining -= 1
        if future.cancelled():  # aiokafka fails deliveries rather than cancel them; if one is
            failure: BaseException | None = KafkaError("delivery cancelled")  # a 503 all the same
        else:
            failure = future.exception()
        if done.done():
            return
        if failure is not None:
            done.set_exception(failure)
        elif remaining == 0:
            done.set_result(None)

    for future in sent:
        future.add_done_callback(delivered)
