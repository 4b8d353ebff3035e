"""Appending the gateway's events to Kafka: durable (acks=all, idempotent) before any reply."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, MessageSizeTooLargeError
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from gateway.errors import EventLogUnavailableError
from infra.kafka_clients import BATCH_BYTES, BROKEN_PRODUCER, durable_producer
from infra.partitioner import RememberingPartitioner
from schemas import codec
from schemas.records import Envelope, QueueEntry
from schemas.topics import MAX_MESSAGE_BYTES

log = logging.getLogger(__name__)
_Append = tuple[bytes, Sequence[Envelope], asyncio.Future[None]]
"""One append waiting for its round: the key (its group id), its events, and its answer."""

UNAVAILABLE = "the event log is unavailable: nothing of this request was recorded; retry later"


class EventSink(Protocol):
    """Where the gateway's events go: Kafka in production, a list in unit tests."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def enqueue(self, entry: QueueEntry) -> int: ...

    async def append(self, group_id: str, envelopes: Sequence[Envelope]) -> None: ...


class EventLog:
    def __init__(
        self,
        bootstrap: str,
        events_topic: str,
        queue_topic: str,
        *,
        timeout_s: float,
        new_producer: Callable[[], AIOKafkaProducer] | None = None,
    ) -> None:
        """``new_producer`` makes a producer, at start and whenever a broken one is renewed;
        by default the durable producer for ``bootstrap``."""
        self.events_topic = events_topic
        self.queue_topic = queue_topic
        self.timeout_s = timeout_s
        self.bootstrap = bootstrap
        self._new_producer = new_producer or self._durable_producer
        self._partitioner = RememberingPartitioner()
        """The producer's own rule (``durable_producer``): a group's events on one partition."""

    def _durable_producer(self) -> AIOKafkaProducer:
        return durable_producer(
            self.bootstrap,
            linger_ms=0,
            max_batch_size=BATCH_BYTES,
            request_timeout_ms=int(self.timeout_s * 1000),
            client_id="forge-gateway",
        )

    async def start(self) -> None:
        """Connect; aiokafka binds its producer to the running event loop, so it is made here."""
        self.producer: AIOKafkaProducer = self._new_producer()
        self._renewing = False
        self._gathering: list[_Append] = []
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

    async def append(self, group_id: str, envelopes: Sequence[Envelope]) -> None:
        """Store events (all of one rollout of ``group_id``, their key) or raise; returns once
        all are acknowledged.

        The whole of it is bounded: a full producer buffer waits inside the round too. Appends
        are handed to the producer in rounds: one alone goes at once, and those that arrive
        while a round waits for its acknowledgements go together in the next (a group
        commit): under load a produce request carries many calls' events, not one call's,
        and nobody waits for a linger."""
        if not envelopes:
            return
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        # A timer on `done` itself (cheaper than a timeout scope per call): once `done` is
        # failed, or cancelled with its caller, a round skips it.
        deadline = loop.call_later(self.timeout_s, _expire, done)
        self._gathering.append((group_id.encode(), envelopes, done))
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
        """Rounds until nothing is gathering. Each round's appends still waited for are sent as
        one produce batch per partition (up to ``BATCH_BYTES``), and each is answered by
        callbacks on its batches' deliveries: no task, gather or per-record future per call
        (aiokafka's ``send`` costs about 10 µs of CPU a record, a batch about 4)."""
        while self._gathering:
            gathered, self._gathering = self._gathering, []
            appends = [append for append in gathered if not append[2].done()]
            deliveries = await self._send_round(appends) if appends else set()
            if deliveries:
                await asyncio.wait(deliveries)

    async def _send_round(self, appends: Sequence[_Append]) -> set[asyncio.Future[Any]]:
        """Send the round's records; returns the batches' deliveries."""
        producer = self.producer
        try:
            partitions = sorted(await producer.partitions_for(self.events_topic))
        except Exception as exc:  # handed to the appenders, never lost in this task
            for _, _, done in appends:
                _fail(done, _unavailable(exc))
            return set()
        batches = _RoundBatches(producer, self.events_topic)
        for key, envelopes, done in appends:
            try:  # every record of the call checked before any is handed over
                records = [_record(key, env) for env in envelopes]
                for key, value in records:
                    partition = self._partitioner(key, partitions, partitions)
                    await batches.add(partition, key, value, done)
            except Exception as exc:  # e.g. a record over the size limit: its caller's alone
                _fail(done, exc)
        return await batches.send_all()

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


def _fail(done: asyncio.Future[None], exc: BaseException) -> None:
    if not done.done():
        done.set_exception(exc)


def _unavailable(exc: Exception) -> Exception:
    """What the producer raised, as an error the appender answers 503 (aiokafka also raises
    assertions, e.g. for a partition missing from its metadata)."""
    return exc if isinstance(exc, KafkaError | OSError) else KafkaError(repr(exc))


def _record(key: bytes, envelope: Envelope) -> tuple[bytes, bytes]:
    """An envelope's key and value; one over the producer's request size is refused, as
    ``send`` refuses it."""
    value = codec.encode(envelope)
    size = DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, [])
    if size > MAX_MESSAGE_BYTES:
        raise MessageSizeTooLargeError(f"an event of {size} bytes exceeds {MAX_MESSAGE_BYTES}")
    return key, value


class _RoundBatches:
    """One round's open batch per partition, and who waits on each batch sent."""

    def __init__(self, producer: AIOKafkaProducer, topic: str) -> None:
        self.producer = producer
        self.topic = topic
        self._open: dict[int, tuple[BatchBuilder, list[asyncio.Future[None]]]] = {}
        self._waits: dict[asyncio.Future[None], list[asyncio.Future[Any]]] = {}

    async def add(
        self, partition: int, key: bytes, value: bytes, done: asyncio.Future[None]
    ) -> None:
        builder, members = self._open.get(partition) or self._opened(partition)
        if builder.append(key=key, value=value, timestamp=None) is None:  # full: send it
            await self._send(partition)
            builder, members = self._opened(partition)
            builder.append(key=key, value=value, timestamp=None)  # an empty batch takes one
        if not members or members[-1] is not done:
            members.append(done)

    async def send_all(self) -> set[asyncio.Future[Any]]:
        """Send the batches still open; returns every delivery of the round."""
        for partition in list(self._open):
            await self._send(partition)
        for done, deliveries in self._waits.items():
            _answer_when_delivered(deliveries, done)
        return {d for deliveries in self._waits.values() for d in deliveries}

    def _opened(self, partition: int) -> tuple[BatchBuilder, list[asyncio.Future[None]]]:
        self._open[partition] = (self.producer.create_batch(), [])
        return self._open[partition]

    async def _send(self, partition: int) -> None:
        builder, members = self._open.pop(partition)
        try:
            delivery = await self.producer.send_batch(builder, self.topic, partition=partition)
        except Exception as exc:  # handed to the appenders, never lost in this task
            for done in members:
                _fail(done, _unavailable(exc))
            return
        for done in members:
            self._waits.setdefault(done, []).append(delivery)


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
