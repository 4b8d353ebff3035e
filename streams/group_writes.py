"""The outputs of one owned forge.events partition, committed in Kafka transactions: each
settled group's trajectories, its mark (the members, by rollout id) and the partition's floor
together, so a group decided at its timeout is decided once — a restart or the next owner
reads the marks first and repeats no decision, and finds none half written.

One transactional producer per events partition, its id ``{app_id}-events-{partition}``: a new
owner starting its producer fences the previous owner's (a zombie included) and completes or
aborts its open transaction before it reads the marks (``streams.settled_groups``). Faust's
``processing_guarantee="exactly_once"`` does not fit (docs/decisions.md): it commits only the
offsets Faust itself acked, never a floor held below open rollouts.

A producer fenced stays so: the partition waits for the next generation, whose owner starts
one of its own. Any other failure (the broker away) aborts the transaction and tries again
after a bounded backoff, everything not committed kept.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import IllegalOperation, KafkaError, ProducerFenced
from aiokafka.structs import OffsetAndMetadata

from infra.kafka_clients import BATCH_BYTES, PRODUCER_DURABLE
from schemas import codec
from streams.events_partition import EventsPartition
from streams.group_scorer import Settlement
from streams.watermarks import EventsProgress, newest_metadata

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
    await producer.start()
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
        before_commit: Callable[[], Awaitable[None]] | None = None,
        on_committed: Callable[[list[Settlement]], None] | None = None,
    ) -> None:
        self.producer = producer
        self.events = events
        self.consumer_group = consumer_group
        self.partition = partition
        self.progress = progress
        self.topics = topics
        self.before_commit = before_commit
        self.on_committed = on_committed
        self.fenced = False
        self._new: list[Settlement] = []
        self._forgotten: list[str] = []
        self._attempt: list[Settlement] = []
        """Taken into a transaction not committed yet: in every retry until it is."""
        self._forgetting: list[str] = []
        self._floor: int | None = None
        """Committed last."""
        self._task: asyncio.Task[None] | None = None

    def add(self, settlements: list[Settlement]) -> None:
        if settlements:
            self._new.extend(settlements)
            self.request()

    def forget(self, groups: list[str]) -> None:
        """Marks past keeping: a tombstone each, in the next transaction."""
        if groups:
            self._forgotten.extend(groups)
            self.request()

    def request(self) -> None:
        """Commit what is new, and the floor if it moved, unless a commit is on its way (it
        takes everything new before it ends)."""
        if self.fenced or (self._task is not None and not self._task.done()):
            return
        self._task = asyncio.ensure_future(self._write_all())

    async def _write_all(self) -> None:
        backoff = MIN_BACKOFF_S
        while not self.fenced:
            taken, self._new = self._new, []
            for settlement in taken:
                self.partition.writing(settlement.group)
            self._attempt += taken
            self._forgetting += self._forgotten
            self._forgotten = []
            floor = self.partition.floor()
            if not self._attempt and not self._forgetting and floor in (None, self._floor):
                return
            try:
                await self._transaction(self._attempt, self._forgetting, floor)
            except ProducerFenced:
                log.warning("%s: fenced, another owner has the partition", self.events)
                self.fenced = True
                return
            except KafkaError as error:
                if self.producer._txn_manager.is_fatal_error():  # aiokafka 0.14: no accessor
                    log.error("%s: the producer failed for good (%r): the partition waits "
                              "for the next generation", self.events, error)  # fmt: skip
                    self.fenced = True
                    return
                log.warning("%s: a transaction failed (%r): again in %.1f s", self.events,
                            error, backoff)  # fmt: skip
                await self._abort()
                await asyncio.sleep(backoff)
                backoff = min(MAX_BACKOFF_S, 2 * backoff)
                continue
            backoff = MIN_BACKOFF_S
            self._floor = floor
            done, self._attempt, self._forgetting = self._attempt, [], []
            for settlement in done:
                self.partition.written(settlement.group)
            if self.on_committed is not None:
                self.on_committed(done)

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

    async def _abort(self) -> None:
        try:
            await self.producer.abort_transaction()
        except (KafkaError, IllegalOperation) as error:  # not in a transaction; the broker away
            log.warning("%s: abort failed (%r)", self.events, error)

    async def stop(self) -> None:
        """At the end of the generation: what is not committed is read again by the next."""
        self.fenced = True
        if self._task is not None:
            self._task.cancel()
        await self.producer.stop()
