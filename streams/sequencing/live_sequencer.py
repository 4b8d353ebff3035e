"""The live sequencer: exactly one writer of forge.train, exact across restarts by identity.

- **One at a time.** Every worker runs this task, but only the member of the consumer group
  ``<app_id>-sequencer`` that holds forge.queue's single partition sequences (Kafka's group
  protocol elects it; when it dies, its session expires and another takes over).
- **Fenced by the broker.** The holder writes through a transactional producer with the stable
  id ``<app_id>-sequencer``: starting it aborts whatever an older holder left open and fences
  it, so a zombie (say, resumed after SIGSTOP past its session) cannot commit one sample.
- **Progress is an identity.** Only after fencing, forge.train is read (read_committed) and the
  queue indices it holds are seeded into the rebuilt FIFO as consumed (``WindowedFifo``): they
  are never written again, and their trajectories need not be in the log any more.
A term that fails — a broker restart, or fenced by a newer term — is started again after a
bounded backoff while the group still hands this worker the partition: the group, not the
fence, says who holds the lease (a resumed zombie's old term is fenced while the group may
already have handed the partition back to it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import faust
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka.errors import InvalidProducerEpoch, ProducerFenced

from infra.kafka_clients import (
    BATCH_BYTES,
    CONSUMER_LARGE,
    PRODUCER_DURABLE,
    Delivered,
    topic_partitions,
)
from infra.log_reader import LogRange, read_log
from schemas import codec
from schemas.errors import SchemaError
from schemas.records import PolicyUpdated, QueueEntry, TrainSample, Trajectory
from schemas.topics import derived_train_topic
from streams.analytics.sinks import UNSET_STALENESS, SinkBuffer, rollout_row
from streams.config import StreamsSettings
from streams.event_time.scored_through import ScoredHorizon, ScoredThrough, scored_through_topic
from streams.pipeline_config import PipelineConfig
from streams.sequencing.sequencer import EventTimeSequencer
from streams.stalls import Stalls

log = logging.getLogger(__name__)
MIN_BACKOFF_S, MAX_BACKOFF_S = 0.5, 10.0
CLAIMS_FRESH = 3
"""Rounds of ``group_check_s`` within which every events partition's last claim must have been
read for the end of a log to be applied whole: a paused or dead owner's claims stop."""
SEQUENCER_STAGE = "sequencer"
"""Its name in ``streams.stalls``: every term failing while the lease is held is a stall."""
STABLE_TERM_S = 60.0
"""A term that ran this long ended by a new fault: retry it from the shortest backoff."""


class _Lease(ConsumerRebalanceListener):  # type: ignore[misc]
    """Whether this worker holds forge.queue's partition in the sequencer group."""

    def __init__(self) -> None:
        self.held = False
        self.consumer: AIOKafkaConsumer | None = None

    async def on_partitions_revoked(self, revoked: Any) -> None:
        self.held = False

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.held = bool(assigned)
        if assigned and self.consumer is not None:
            self.consumer.pause(*assigned)  # membership only: the records are read elsewhere


def add_sequencer(
    app: faust.App,
    settings: StreamsSettings,
    bootstrap: str,
    config: PipelineConfig,
    sink: SinkBuffer | None,
    on_emitted: Callable[[int], None] | None = None,
    stalls: Stalls | None = None,
) -> None:
    """The sequencer's task, added to ``app``: every worker runs it, one holds the lease."""

    @app.task
    async def sequence() -> None:
        await run_sequencer(settings, bootstrap, config, sink, on_emitted, stalls)


def transactional_id(settings: StreamsSettings) -> str:
    return f"{settings.app_id}-sequencer"


async def run_sequencer(
    settings: StreamsSettings,
    bootstrap: str,
    config: PipelineConfig,
    sink: SinkBuffer | None,
    on_emitted: Callable[[int], None] | None = None,
    stalls: Stalls | None = None,
) -> None:
    """Sequence while this worker holds the lease; stand by otherwise. ``stalls`` is told of
    each failed term, each commit of samples begun, and each round a term gets through."""
    stalls = stalls or Stalls(float("inf"))
    lease = _Lease()
    election = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=transactional_id(settings), enable_auto_commit=False
    )
    lease.consumer = election
    election.subscribe([settings.queue_topic], listener=lease)
    await election.start()
    term: asyncio.Task[None] | None = None
    term_started = 0.0
    backoff = MIN_BACKOFF_S
    try:
        while True:
            await election.getmany(timeout_ms=500)  # rebalances reach the listener here
            if term is not None and term.done():
                failure = None if term.cancelled() else term.exception()
                if failure is not None:
                    # Fenced too: a newer term started elsewhere, but only the group says who
                    # holds the lease now. Giving it up here could leave the partition
                    # with this worker and nobody sequencing. A zombie not yet told
                    # by the group may fence the holder once more; each term is exact anyway.
                    fenced = isinstance(failure, ProducerFenced | InvalidProducerEpoch)
                    stalls.failed(SEQUENCER_STAGE, time.monotonic(), repr(failure))
                    log.warning("sequencer term ended: %s; retrying while the lease is ours",
                                "fenced" if fenced else repr(failure))  # fmt: skip
                    if time.monotonic() - term_started > STABLE_TERM_S:
                        backoff = MIN_BACKOFF_S  # a term that ran a while: a new fault
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, MAX_BACKOFF_S)
                term = None
            if lease.held and term is None:
                term_started = time.monotonic()
                term = asyncio.create_task(
                    _sequence(settings, bootstrap, config, sink, on_emitted, stalls)
                )
            elif not lease.held and term is not None:
                stalls.succeeded(SEQUENCER_STAGE)  # another worker's to report now
                term.cancel()
                await asyncio.gather(term, return_exceptions=True)
                term = None
    finally:
        if term is not None:
            term.cancel()
            await asyncio.gather(term, return_exceptions=True)
        await election.stop()


RowsOut = Callable[[list[list[Any]]], object]
"""Where rollout rows go: a SinkBuffer's ``add``, handed over to the event loop's thread."""


def emitted_indices(
    bootstrap: str, train_topic: str, rows_out: RowsOut | None = None, chunk: int = 2000
) -> frozenset[int]:
    """Queue indices of the committed samples in forge.train; each sample's rollout row (its
    trained trajectory, its staleness) to ``rows_out`` in chunks, so rows an earlier term had
    not flushed when it died are recorded again."""
    spec = derived_train_topic(train_topic)
    indices: set[int] = set()
    rows: list[list[Any]] = []
    for delivered in read_log(bootstrap, spec, LogRange()):
        sample = delivered.record if isinstance(delivered, Delivered) else None
        if not isinstance(sample, TrainSample):
            continue
        indices.add(sample.queue_index)
        if rows_out is not None:
            rows.append(rollout_row(sample.trajectory, sample.staleness))
            if len(rows) >= chunk:
                rows_out(rows)
                rows = []
    if rows_out is not None and rows:
        rows_out(rows)
    return frozenset(indices)


async def _sequence(
    settings: StreamsSettings,
    bootstrap: str,
    config: PipelineConfig,
    sink: SinkBuffer | None,
    on_emitted: Callable[[int], None] | None,
    stalls: Stalls,
) -> None:
    """One term: fence, learn what forge.train holds, rebuild from the inputs, then follow.

    Nothing is applied before the inputs are read up to their ends at the term's start. Then
    the watermark is the oldest events partition's claim (``streams.event_time.scored_through``): a
    group's trajectories may come late (their partition with a paused or dead worker, or
    upstream working through a backlog), and nothing completed before the claim can. Queue
    entries and policy updates are stamped as they are written: for them the watermark also
    trails the wall clock by ``lateness_s``. Once the inputs are quiet for
    ``sequencer_flush_s`` the wall clock is dropped, and once every events partition's owner,
    alive, claims nothing is on its way, every fact is applied: the end of a log, as a replay
    applies it. Until every partition has claimed, nothing is applied.

    Rollout rows are written here, not where groups are scored: each rollout's first scoring applied
    (the one the FIFO keeps) without a staleness, and again with the staleness it was consumed
    at once its sample is committed — so analytics hold what was trained, even for a group
    scored twice. A term starts by recording forge.train's samples again.
    """
    term = _Term(settings, bootstrap, sink)
    await term.producer.start()  # init_transactions: an older holder is fenced from here on
    try:
        sequencer = config.sequencer(consumed=await term.emitted(), records=sink is not None)
        await term.consumer.start()
        await term.assign()
        while True:
            await term.read_inputs(sequencer)
            if term.backlog is not None:
                if not await term.caught_up():
                    continue
                term.backlog = None
            fresh = sequencer.advance(term.watermark())
            if sink is not None:
                sink.add([rollout_row(t, UNSET_STALENESS) for t in sequencer.drain_recorded()])
            if fresh:
                stalls.attempting(SEQUENCER_STAGE, time.monotonic())
                await term.emit(fresh)  # retried inside for good while too few replicas are in sync
                if on_emitted is not None:
                    on_emitted(len(fresh))
            stalls.succeeded(SEQUENCER_STAGE)  # a round applied and its samples committed
    finally:
        await term.consumer.stop()
        await term.producer.stop()


class _Term:
    """One term's clients and its view of the inputs: the fenced producer, the consumer of
    the queue, trajectories, policies and claims, and the claims read so far."""

    def __init__(self, settings: StreamsSettings, bootstrap: str, sink: SinkBuffer | None) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self.sink = sink
        self.producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, transactional_id=transactional_id(settings),
            max_batch_size=BATCH_BYTES, **PRODUCER_DURABLE,
        )  # fmt: skip
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, **CONSUMER_LARGE
        )
        self.claims_topic = scored_through_topic(settings.app_id)
        self.partitions: list[Any] = []
        self.backlog: dict[Any, int] | None = None
        """The inputs' ends at the term's start, until they are read up to them."""
        self.scored = ScoredHorizon(1)
        self.last_input = time.monotonic()

    async def emitted(self) -> frozenset[int]:
        """What forge.train holds, its samples' rollout rows recorded again."""
        loop = asyncio.get_running_loop()
        sink = self.sink
        rows_out = None if sink is None else partial(loop.call_soon_threadsafe, sink.add)
        emitted = await asyncio.to_thread(
            emitted_indices, self.bootstrap, self.settings.train_topic, rows_out
        )
        log.info("sequencer term: forge.train holds %d samples", len(emitted))
        return emitted

    async def assign(self) -> None:
        settings = self.settings
        topics = (settings.queue_topic, settings.trajectories_topic, settings.policy_topic,
                  self.claims_topic)  # fmt: skip
        self.partitions = await asyncio.to_thread(topic_partitions, self.bootstrap, topics)
        self.consumer.assign(self.partitions)
        await self.consumer.seek_to_beginning(*self.partitions)
        self.backlog = await self.consumer.end_offsets(self.partitions)
        claim_partitions = sum(tp.topic == self.claims_topic for tp in self.partitions)
        if not claim_partitions:
            raise RuntimeError(f"no topic {self.claims_topic}: the streams app creates it at start")
        self.scored = ScoredHorizon(claim_partitions)

    async def read_inputs(self, sequencer: EventTimeSequencer) -> None:
        """One fetch: claims to the scored horizon, every other record a fact; then how far
        each trajectories partition is read."""
        batches = await self.consumer.getmany(timeout_ms=200, max_records=2000)
        for tp, messages in batches.items():
            for message in messages:
                if tp.topic == self.claims_topic:
                    _add_claim(self.scored, message, time.monotonic())
                else:
                    _add_fact(sequencer, tp.topic, self.settings, message)
                    self.last_input = time.monotonic()
        trajectories = [
            tp for tp in self.partitions if tp.topic == self.settings.trajectories_topic
        ]
        self.scored.read_to({tp.partition: await self.consumer.position(tp) for tp in trajectories})

    async def caught_up(self) -> bool:
        """Whether every input is read up to its end at the term's start."""
        assert self.backlog is not None
        for tp, end in self.backlog.items():
            if await self.consumer.position(tp) < end:
                return False
        return True

    def watermark(self) -> float:
        """The claims' watermark, trailing the wall clock by ``lateness_s`` while inputs come;
        infinite once they are quiet and every partition's owner claims nothing is on its way."""
        settings, now = self.settings, time.monotonic()
        watermark = self.scored.watermark()
        if now - self.last_input > settings.sequencer_flush_s:
            if self.scored.all_idle(now, CLAIMS_FRESH * settings.group_check_s):
                return float("inf")
            return watermark
        return min(watermark, time.time() - settings.lateness_s)

    async def emit(self, fresh: list[TrainSample]) -> None:
        """``fresh`` to forge.train in one transaction; their rollout rows after it."""
        async with self.producer.transaction():
            for sample in fresh:
                await self.producer.send(
                    self.settings.train_topic, codec.encode(sample), key=sample.sample_id.encode()
                )
        if self.sink is not None:
            self.sink.add([rollout_row(s.trajectory, s.staleness) for s in fresh])


def _add_fact(
    sequencer: EventTimeSequencer, topic: str, settings: StreamsSettings, message: Any
) -> None:
    try:
        if topic == settings.queue_topic:
            sequencer.add_queue_entry(message.offset, codec.decode(message.value, QueueEntry))
        elif topic == settings.policy_topic:
            sequencer.add_policy(codec.decode(message.value, PolicyUpdated))
        else:
            sequencer.add_completion(codec.decode(message.value, Trajectory))
    except SchemaError as exc:
        log.warning("sequencer skipped %s@%d: %s", topic, message.offset, exc)


def _add_claim(scored: ScoredHorizon, message: Any, now: float) -> None:
    if message.value is None:
        return  # compacted away: nothing to rely on
    try:
        scored.read_claim(ScoredThrough.decode(message.value), now)
    except ValueError as exc:
        log.warning("sequencer skipped claim %d: %s", message.offset, exc)
