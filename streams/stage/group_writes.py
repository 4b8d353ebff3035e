"""The outputs of one owned forge.events partition, committed in Kafka transactions: each
settled group's trajectories, its mark (the members, by rollout id) and the partition's floor
together, so a group decided at its timeout is decided once — a restart or the next owner
reads the marks first and repeats no decision, and finds none half written.

One transactional producer per events partition, its id ``{app_id}-events-{partition}``: a new
owner starting its producer fences the previous owner's (a zombie included) and completes or
aborts its open transaction before it reads the marks (``streams.stage.settled_groups``). Faust's
``processing_guarantee="exactly_once"`` does not fit (docs/decisions.md): it commits only the
offsets Faust itself acked, never a floor held below open rollouts.

A failure the transaction can be aborted after (the broker away) is retried after a bounded
backoff, everything not committed kept. A producer fenced, failed for good, or whose own state
the broker refuses (``BROKEN_PRODUCER``: after a broker restart, a gap in its sequence numbers
fails every retry) commits nothing more: ``on_failed`` asks for a new generation, whose owner
takes the partition over afresh with a new producer and redoes what was not committed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import ProducerFenced
from aiokafka.structs import OffsetAndMetadata

from infra.kafka_clients import BATCH_BYTES, BROKEN_PRODUCER, PRODUCER_DURABLE
from schemas import codec
from streams.event_time.watermarks import EventsProgress, newest_metadata
from streams.stage.events_partition import EventsPartition
from streams.stage.group_scorer import Settlement
from streams.stalls import Stalls, stage_name

log = logging.getLogger(__name__)

MIN_BACKOFF_S, MAX_BACKOFF_S = 0.5, 30.0


@dataclass(frozen=True)
class Topics:
    trajectories: str
    marks: str


def transactional_id(app_id: str, partition: int) -> str:
    return f"{app_id}-events-{partition}"


async def start_producer(bootstrap: str, app_id: str, partition: int) -> AIOKafkaProducer:
    """The partition's producer, started: the previous holder of its id is fenced from here
    on, and its open transaction is over."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=transactional_id(app_id, partition),
        max_batch_size=BATCH_BYTES, **PRODUCER_DURABLE,
    )  # fmt: skip
    try:
        await producer.start()
    except BaseException:
        await producer.stop()
        raise
    return producer


class GroupWrites:
    def __init__(
        self,
        producer: AIOKafkaProducer,
        events: TopicPartition,
        consumer_group: str,
        partition: EventsPartition,
        progress: EventsProgress,
        topics: Topics,
        *,
        before_commit: Callable[[], Awaitable[None]] | None = None,
        on_committed: Callable[[list[Settlement]], None] | None = None,
        on_failed: Callable[[GroupWrites], Awaitable[None]] | None = None,
        stalls: Stalls | None = None,
    ) -> None:
        self.producer = producer
        self.events = events
        self.consumer_group = consumer_group
        self.partition = partition
        self.progress = progress
        self.topics = topics
        self.before_commit = before_commit
        self.on_committed = on_committed
        self.on_failed = on_failed
        self.stalls = stalls
        self.failed = False
        """Fenced, or the producer failed for good: nothing more is committed here."""
        self._new: list[Settlement] = []
        self._forgotten: list[str] = []
        self._attempt: list[Settlement] = []
        """Taken into a transaction not committed yet: in every retry until it is."""
        self._forgetting: list[str] = []
        self._floor: int | None = None
        """Committed last."""
        self._task: asyncio.Task[None] | None = None
        self._transaction_over: asyncio.Future[None] | None = None
        """Resolved as the next transaction ends, committed or not (``wait_unwritten_below``)."""

    def add(self, settlements: list[Settlement]) -> None:
        if settlements:
            self._new.extend(settlements)
            self.request()

    def forget(self, groups: list[str]) -> None:
        """Marks past keeping: a tombstone each, in the next transaction."""
        if groups:
            self._forgotten.extend(groups)
            self.request()

    def unwritten_rollouts(self) -> int:
        """Scored rollouts not committed yet: new, or in the transaction on its way."""
        return sum(len(s.trajectories) for s in (*self._new, *self._attempt))

    async def wait_unwritten_below(self, limit: int) -> None:
        """Return once at most ``limit`` rollouts wait to be written, or once nothing is being
        written (the writer failed or stopped: the next generation redoes it). The reader
        awaits this after each batch, so a backlog is read no faster than it is committed:
        reading runs ahead of the transactions, and a worker behind a backlog would otherwise
        hold all of it (~9 KB a rollout) and starve its heartbeats."""
        while (
            self.unwritten_rollouts() > limit and self._task is not None and not self._task.done()
        ):
            if self._transaction_over is None:
                self._transaction_over = asyncio.get_running_loop().create_future()
            await asyncio.wait([self._task, self._transaction_over],
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip

    def _transaction_ended(self) -> None:
        over, self._transaction_over = self._transaction_over, None
        if over is not None and not over.done():
            over.set_result(None)

    def request(self) -> None:
        """Commit what is new, and the floor if it moved, unless a commit is on its way (it
        takes everything new before it ends)."""
        if self.failed or (self._task is not None and not self._task.done()):
            return
        self._task = asyncio.ensure_future(self._write_all())

    async def _write_all(self) -> None:
        backoff = MIN_BACKOFF_S
        while not self.failed:
            taken, self._new = self._new, []
            for settlement in taken:
                self.partition.writing(settlement.group)
            self._attempt += taken
            self._forgetting += self._forgotten
            self._forgotten = []
            floor = self.partition.floor()
            if not self._attempt and not self._forgetting and floor in (None, self._floor):
                return
            if self.stalls is not None:
                self.stalls.attempting(stage_name(self.events.partition), time.monotonic())
            try:
                await self._transaction(self._attempt, self._forgetting, floor)
            except ProducerFenced as fenced:
                self._transaction_ended()
                self._attempt_failed(fenced)
                await self._fail("fenced: another producer has its id")
                return
            except Exception as error:  # aiokafka raises more than KafkaError (IllegalOperation)
                self._transaction_ended()
                self._attempt_failed(error)
                broken = isinstance(error, BROKEN_PRODUCER) or _fatal(self.producer)
                if broken or not await self._aborted():
                    await self._fail(f"the producer failed ({error!r})")
                    return
                log.warning("%s: a transaction failed (%r): again in %.1f s", self.events,
                            error, backoff)  # fmt: skip
                await asyncio.sleep(backoff)
                backoff = min(MAX_BACKOFF_S, 2 * backoff)
                continue
            backoff = MIN_BACKOFF_S
            if self.stalls is not None:
                self.stalls.succeeded(stage_name(self.events.partition))
            self._floor = floor
            done, self._attempt, self._forgetting = self._attempt, [], []
            for settlement in done:
                self.partition.written(settlement.group)
            self._transaction_ended()
            if self.on_committed is not None:
                self.on_committed(done)

    def _attempt_failed(self, error: Exception) -> None:
        if self.stalls is not None:
            stage = stage_name(self.events.partition)
            self.stalls.failed(stage, time.monotonic(), repr(error))

    async def _fail(self, why: str) -> None:
        log.warning("%s: %s; nothing more is committed by this producer", self.events, why)
        self.failed = True
        if self.on_failed is not None:
            await self.on_failed(self)

    async def _transaction(
        self, settlements: list[Settlement], forgotten: list[str], floor: int | None
    ) -> None:
        if self.before_commit is not None and settlements:
            await self.before_commit()
        await self.producer.begin_transaction()
        sent = []
        for settlement in settlements:
            key = settlement.group.encode()
            for trajectory in settlement.trajectories:
                sent.append(await self.producer.send(
                    self.topics.trajectories, codec.encode(trajectory), key=key
                ))  # fmt: skip
            assert settlement.mark is not None
            sent.append(await self.producer.send(
                self.topics.marks, settlement.mark.encode(), key=key,
                partition=self.events.partition,
            ))  # fmt: skip
        for group in forgotten:
            sent.append(await self.producer.send(
                self.topics.marks, None, key=group.encode(), partition=self.events.partition
            ))  # fmt: skip
        if floor is not None:
            newest = self.progress.below_floor(self.events.partition, floor)
            offsets = {self.events: OffsetAndMetadata(floor, newest_metadata(newest))}
            await self.producer.send_offsets_to_transaction(offsets, self.consumer_group)
        await asyncio.gather(*sent)
        await self.producer.commit_transaction()

    async def _aborted(self) -> bool:
        """The open transaction aborted (or none open); False when the producer cannot."""
        if not _in_transaction(self.producer):
            return True
        try:
            await self.producer.abort_transaction()
        except Exception as error:  # state checks raise AssertionError, the broker KafkaError
            log.warning("%s: abort failed (%r)", self.events, error)
            return False
        return True

    async def stop(self) -> None:
        """At the end of the generation: what is not committed is read again by the next
        owner. An open transaction is aborted, or the broker would hold the readers of
        forge.trajectories and the marks at it until the transaction timeout."""
        self.failed = True
        if self._task is not None:
            self._task.cancel()
        try:
            async with asyncio.timeout(STOP_ABORT_S):
                await self._aborted()
        except TimeoutError:
            log.warning("%s: the open transaction was not aborted in time", self.events)
        await self.producer.stop()


STOP_ABORT_S = 5.0


def _in_transaction(producer: AIOKafkaProducer) -> bool:
    """aiokafka 0.14 has no public accessor for its transaction state."""
    return bool(producer._txn_manager.is_in_transaction())


def _fatal(producer: AIOKafkaProducer) -> bool:
    return bool(producer._txn_manager.is_fatal_error())
