"""The live Faust worker: assemble rollouts, score complete groups, sequence, sink.

- ``assemble`` (forge.events, keyed by group, or by rollout in older logs; read a batch at a time,
  ``streams.faust_transport``): open rollouts are held in memory
  (``streams.open_rollouts``); when one ends, its events go as one bundle to an internal topic
  keyed by group.
- ``score`` (internal topic, keyed by group; read a fetched batch at a time too): open groups
  are held in memory (``streams.group_scorer``); a complete group is scored, its trajectories
  go to forge.trajectories (and their calls to the calls table), then its mark to a compacted
  topic;
  every ``group_check_s`` each partition claims how far its trajectories are written
  (``streams.scored_through``), the sequencer's watermark.
- ``sequence`` (a task over forge.queue, forge.trajectories, forge.policy and the claims): the
  event-time sequencer, active in one worker of the group at a time, fenced by the broker and
  exact across restarts by sample identity (``streams.live_sequencer``); it writes the
  rollouts table.
No table, no changelog: each input partition is the log of the state built from it, committed
only up to the first message of anything still held (``streams.commit_floor``) — Faust's own
acks and commits are off for these topics — and read again from there after a restart or a
rebalance (``streams.live_state``). Undecodable records go to forge.dlq with the reason, and so
do rollouts that cannot be scored: larger than one message, with a non-finite reward input,
ended after their group's timeout, or never ended. This module only wires the pure cores.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any, cast

import faust
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError
from faust.exceptions import ConsumerNotStarted, ProducerSendError
from faust.types import TP

from infra.analytics import analytics_client, ensure_tables
from infra.config import InfraSettings
from infra.kafka_clients import BATCH_BYTES, EndOffsets, ensure_topics, topic_partitions
from infra.metrics_server import StreamsMetrics, serve_metrics
from infra.partitioner import RememberingPartitioner
from schemas import codec
from schemas.records import Envelope, TrainStep
from schemas.topics import DLQ, EVENTS, MAX_MESSAGE_BYTES, TRAJECTORIES, TopicSpec
from streams import bundles
from streams.config import StreamsSettings, load_pipeline_config
from streams.dead_letters import DeadLetters
from streams.deliveries import Deliveries
from streams.faust_transport import (
    BATCHES_BUFFERED,
    BatchCountingMonitor,
    Transport,
    current_records,
)
from streams.floor_commits import commit_with_metadata, committed_metadata
from streams.group_scorer import GroupScorer
from streams.live_sequencer import run_sequencer
from streams.live_state import Generations, LiveState, ScorerPartition
from streams.open_rollouts import EndedRollout, OpenRollouts
from streams.scored_through import ScoredThrough, newest_claimed, scored_through_topic
from streams.settled_groups import SettledGroups, SettledMark, read_marks
from streams.sinks import SinkBuffer, call_rows
from streams.sql_endpoint import open_endpoint
from streams.stall_watch import StallWatch
from streams.watermarks import (
    TICK_HEADER,
    WATERMARK_HEADER,
    EventsProgress,
    SharedHorizon,
    Watermark,
    newest_metadata,
    newest_of_metadata,
    tick_horizon,
)

log = logging.getLogger(__name__)


class FlushSinkBeforeCommit(faust.Sensor):  # type: ignore[misc]
    """Inserts the buffered rows as one of Faust's own commits (forge.metrics) begins: a
    committed step's row is stored unless the store is down (then it waits in the buffer)."""

    def __init__(self, buffer: SinkBuffer) -> None:
        super().__init__()
        self.buffer = buffer

    def on_commit_initiated(self, consumer: Any) -> None:
        self.buffer.flush()


def create_streams_app(
    settings: StreamsSettings, bootstrap: str, infra: InfraSettings
) -> faust.App:
    config = load_pipeline_config(settings.pipeline_file)
    # The scorer's topic is partitioned as forge.events is when the group first starts (and
    # the marks beside it): grown partitions need a new app_id.
    partitions = len(topic_partitions(bootstrap, (settings.events_topic,))) or EVENTS.partitions
    app = faust.App(
        settings.app_id,
        broker=f"kafka://{bootstrap}",
        store="memory://",
        datadir=str(infra.home / "streams"),
        value_serializer="raw",
        key_serializer="raw",
        topic_replication_factor=1,
        topic_partitions=partitions,
        web_host="127.0.0.1",
        web_bind=settings.web_bind,
        web_port=settings.web_port,
        producer_max_request_size=MAX_MESSAGE_BYTES,
        producer_max_batch_size=BATCH_BYTES,
        producer_partitioner=RememberingPartitioner(),
        consumer_max_fetch_size=MAX_MESSAGE_BYTES * 2,
        processing_guarantee="at_least_once",
        # A worker killed with -9 holds its partitions until its session expires.
        broker_session_timeout=10.0,
        broker_heartbeat_interval=3.0,
        Monitor=BatchCountingMonitor,
    )
    app.transport = Transport(
        app.conf.broker_consumer,
        app,
        batched_topics=(settings.events_topic, ended_topic(settings.app_id)),
    )
    # Faust's assignor ignores a topic missing from metadata at the first rebalance; on a loaded
    # machine the bundles sent meanwhile are then never read. Created up front, nothing is missing
    # (forge.trajectories too: the claims name its partitions).
    ensure_topics(
        bootstrap,
        (*internal_topics(settings.app_id, partitions),
         replace(TRAJECTORIES, name=settings.trajectories_topic)),
        timeout_s=infra.kafka_connect_timeout_s,
    )  # fmt: skip
    scorer_topic, marks_topic = ended_topic(settings.app_id), settled_topic(settings.app_id)
    # acks=False: Faust never commits these; the floors are committed below.
    events = app.topic(settings.events_topic, key_type=bytes, value_type=bytes, acks=False,
                       maxsize=BATCHES_BUFFERED)  # fmt: skip
    ended = app.topic(scorer_topic, key_type=bytes, value_type=bytes, partitions=partitions,
                      internal=True, acks=False, maxsize=BATCHES_BUFFERED)  # fmt: skip
    marks = app.topic(marks_topic, key_type=bytes, value_type=bytes, partitions=partitions,
                      internal=True)  # fmt: skip
    trajectories = app.topic(settings.trajectories_topic, key_type=bytes, value_type=bytes)
    claims_topic = scored_through_topic(settings.app_id)
    scored = app.topic(claims_topic, key_type=bytes, value_type=bytes, partitions=partitions,
                       internal=True)  # fmt: skip
    dlq = app.topic(DLQ.name, key_type=bytes, value_type=bytes)

    timeout = config.longest_group_timeout
    lateness = timedelta(seconds=settings.lateness_s)
    generations = Generations(
        lambda generation: LiveState(
            generation, OPEN_ROLLOUT_LIMIT * timeout, EventsProgress(settings.idle_flush_s)
        )
    )
    deliveries = Deliveries()
    trajectory_partitions = topic_partitions(bootstrap, (settings.trajectories_topic,))
    metrics = StreamsMetrics(
        app.monitor,
        events_topic=settings.events_topic,
        trajectories_topic=settings.trajectories_topic,
        open_groups=lambda: sum(
            s.groups.open_groups for s in _scorers(generations.current(_generation(app)))
        ),
    )
    serve_metrics(metrics.registry, infra.metrics_port, infra.metrics_bind)
    sink = analytics_client(infra) if settings.sink else None
    buffer = SinkBuffer(sink) if sink is not None else None
    if sink is not None:
        ensure_tables(sink)
    if buffer is not None:
        app.sensors.add(FlushSinkBeforeCommit(buffer))

    letters = DeadLetters(dlq, settings.app_id)

    async def send_bundle(rollouts: OpenRollouts, done: EndedRollout, message: Any) -> None:
        reason = bundles.oversize(done.rollout_id, len(done.bundle))
        if reason is not None:
            await letters.of_message(message, reason)
            rollouts.sent(done.rollout_id)
            return
        await deliveries.send(
            [partial(ended.send, key=done.group, value=done.bundle)],
            then=partial(rollouts.sent, done.rollout_id),
            tag=_bundles_of(message.partition),
        )

    async def assemble_one(state: LiveState, message: Any) -> None:
        """The event joins its open rollout; an ended rollout's events go on as one bundle to
        the group's partition of ``ended`` — or, larger than a message, to forge.dlq."""
        rollouts = state.rollouts_of(message.partition)
        envelope = await letters.decoded(message, Envelope)
        if envelope is None:
            rollouts.floor.processed(message.offset)
        else:
            done = rollouts.add(message.offset, envelope, message.value)
            if done is not None:
                await send_bundle(rollouts, done, message)
            for expired in rollouts.expire():  # named by its start: key, offset
                await letters.of(message.topic, message.partition, expired.offset,
                                 expired.reason, expired.rollout_id.encode(), b"")  # fmt: skip
        # After its bundle is handed over: a watermark sent later follows it in the log.
        state.progress.processed(message.partition, message.offset,
                                 None if envelope is None else envelope.ts,
                                 time.monotonic())  # fmt: skip

    @app.agent(events)
    async def assemble(stream: faust.StreamT) -> None:
        """Each Faust event is a batch of one partition's records (``faust_transport``)."""
        async for event in stream.events():
            state = generations.at(event.message.generation_id)
            if state is None:
                continue  # read in a generation gone: it is read again from the floor
            for message in current_records(app, event):
                await assemble_one(state, message)

    async def scorer_of(state: LiveState, partition: int) -> ScorerPartition:
        """The partition's scorer, its marks and the newest event time claimed for it loaded
        first (once per generation)."""
        found = state.scorers.get(partition)
        if found is not None:
            return found
        settled = SettledGroups(MARK_KEEP * timeout)
        for record, reason in settled.load(await read_marks(bootstrap, marks_topic, partition)):
            await letters.of(marks_topic, partition, record.offset, reason, record.key,
                             record.value)  # fmt: skip
        horizon = SharedHorizon(lateness)
        claimed = await read_marks(bootstrap, claims_topic, partition)  # read as marks are
        newest = newest_claimed([record.value for record in claimed])
        if newest is not None:
            horizon.knew(newest)
        found = ScorerPartition(GroupScorer(config, settled), horizon)
        return state.scorers.setdefault(partition, found)

    async def send_mark(groups: GroupScorer, partition: int, group: bytes,
                        mark: SettledMark) -> None:  # fmt: skip
        """After the group's trajectories (from now on its claims may pass the group) and its
        calls rows: its mark (nothing reads the group again once it is marked), then the floor
        may pass it."""
        groups.written(group)
        if buffer is not None:
            stored: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            buffer.after_stored(partial(stored.set_result, None))
            await stored
        await deliveries.send(
            [partial(marks.send, key=group, value=mark.encode(), partition=partition)],
            then=partial(groups.marked, group),
        )

    async def score_one(state: LiveState, message: Any) -> None:
        """Members arrive one bundle each; a message with a tick header is ``expire_groups``
        asking for the group's timeout to be checked against the event time it carries, one
        with a watermark header an events partition's progress (``send_watermarks``)."""
        scorer = await scorer_of(state, message.partition)
        groups = scorer.groups
        headers = dict(message.headers or ())
        try:
            mark = headers.get(WATERMARK_HEADER)
            if mark is not None:
                scorer.horizon.saw(Watermark.decode(bytes(mark)))
                groups.floor.processed(message.offset)
                return
            tick = headers.get(TICK_HEADER)
            horizon = None if tick is None else tick_horizon(bytes(tick))
            if message.key is None:
                raise ValueError("no group key")
            settled = groups.offer(message.offset, message.key, message.value or b"", horizon)
        except ValueError as error:  # bundles.BadBundleError among them
            await letters.of_message(message, f"not a member's bundle or a tick: {error}")
            groups.floor.processed(message.offset)
            return
        if settled is None:
            return
        for bundle, reason in settled.dead:
            await letters.of_message(message, reason, value=bundle)
        if buffer is not None:  # rollout rows come from the sequencer: the first scoring
            buffer.add(calls=call_rows(e for m in settled.present for e in m.events.events))
        if settled.mark is not None:
            await deliveries.send(
                [partial(trajectories.send, key=message.key, value=codec.encode(t))
                 for t in settled.trajectories],
                then=partial(send_mark, groups, message.partition, message.key, settled.mark),
            )  # fmt: skip

    @app.agent(ended)
    async def score(stream: faust.StreamT) -> None:
        """Each Faust event is a batch of one partition's records (``faust_transport``)."""
        async for event in stream.events():
            state = generations.at(event.message.generation_id)
            if state is None:
                continue
            for message in current_records(app, event):
                await score_one(state, message)

    def owned(topic: str) -> set[int]:
        return {tp.partition for tp in app.consumer.assignment() if tp.topic == topic}

    async def seed_progress(state: LiveState, partitions: set[int]) -> bool:
        """The newest event time each events partition's floor was committed with, merged in
        once per generation before its first watermark or commit (``streams.floor_commits``);
        False while the broker does not say."""
        unseeded = state.progress.unseeded(partitions)
        if not unseeded:
            return True
        tps = [TopicPartition(settings.events_topic, p) for p in sorted(unseeded)]
        try:
            found = await committed_metadata(bootstrap, settings.app_id, tps, METADATA_TIMEOUT_S)
        except (KafkaError, TimeoutError) as error:
            log.warning("the events floors' event times not read: %r", error)  # the broker away
            return False
        for tp, raw in found.items():
            state.progress.seed(tp.partition, newest_of_metadata(raw))
        return True

    async def send_watermark_round(state: LiveState) -> None:
        mine = owned(settings.events_topic)
        state.progress.keep_only(mine)
        if not await seed_progress(state, mine):
            return
        tps = [TP(settings.events_topic, p) for p in sorted(mine)]
        if not tps:
            return
        ends = await app.consumer.highwaters(*tps)  # asked of the broker now, not cached
        headers, counted = [], []
        for tp in tps:
            position = await app.consumer.position(tp)
            mark = state.progress.mark(tp.partition, ends.get(tp), position, time.monotonic())
            headers.append({WATERMARK_HEADER: mark.encode()})
            counted += deliveries.in_flight(_bundles_of(tp.partition))  # the bundles it counts
        if counted:  # acknowledged, not only handed over: one sent again lands after the mark
            await asyncio.wait(counted)
        sent = []
        for header in headers:
            for target in range(partitions):
                sent.append(await ended.send(value=b"", partition=target, headers=header))
        await asyncio.gather(*sent)

    @app.task
    async def send_watermarks() -> None:
        """Every ``group_check_s`` (mode's timer, which keeps its pace), every events partition
        this worker owns tells every partition of ``ended`` how far it is processed
        (``streams.watermarks``); each round is written before the next one's check, as the
        horizon's rule needs."""
        async for _ in app.itertimer(settings.group_check_s, name="watermarks"):
            state = generations.at(_generation(app))
            if state is None:
                continue
            try:
                await send_watermark_round(state)
            except (KafkaError, ConsumerNotStarted, TimeoutError) as error:
                log.warning("watermarks skipped this round: %s", error)  # the broker away

    @app.task
    async def claim_scored_through() -> None:
        """Every ``group_check_s``, half a round after the watermarks (time for the scorers to
        read a round): a claim made as a round is sent counts the round before, and its
        samples wait a round longer. Each timer keeps its own pace: a slow round of one does
        not hold the other."""
        ends = EndOffsets(bootstrap, timeout_s=5 * settings.group_check_s)
        try:
            await app.sleep(settings.group_check_s / 2)
            async for _ in app.itertimer(settings.group_check_s, name="claims"):
                await send_claims(ends)
        finally:
            await ends.close()

    @app.timer(interval=settings.group_check_s)
    async def expire_groups() -> None:
        """Open groups past their timeout get a tick on their own partition (groups change
        only inside the agent), carrying the event time it may assume: the horizon of that
        partition; marks past keeping are forgotten, in the topic too."""
        state = generations.current(_generation(app))
        for partition, scorer in list(state.scorers.items() if state else ()):
            horizon = scorer.horizon.horizon(partitions)
            if horizon is None:
                continue
            header = {TICK_HEADER: horizon.isoformat().encode()}
            for key in scorer.groups.due(horizon):
                await ended.send(key=key, value=b"", partition=partition, headers=header)
            for group in scorer.groups.settled.prune(horizon):
                await marks.send(key=group, value=None, partition=partition,
                                 value_serializer="raw")  # fmt: skip

    async def send_claims(trajectory_ends: EndOffsets) -> None:
        """Each scorer partition this worker owns claims how far its trajectories are written
        (``streams.scored_through``). The ends are asked after the claims are made: what each
        covers lies below them."""
        state = generations.current(_generation(app))
        claims: dict[int, tuple[datetime, bool, datetime | None]] = {}
        for partition, scorer in list(state.scorers.items() if state else ()):
            horizon = scorer.horizon.horizon(partitions)
            if horizon is not None:
                idle = scorer.horizon.still(partitions) and scorer.groups.idle(horizon)
                through = scorer.groups.scored_through(horizon)
                claims[partition] = through, idle, scorer.horizon.newest
        if not claims:
            return
        if not trajectory_partitions:  # metadata not there yet: claims naming none are void
            topics = (settings.trajectories_topic,)
            trajectory_partitions.extend(
                await asyncio.to_thread(topic_partitions, bootstrap, topics)
            )
            return
        try:
            ends = await trajectory_ends.of(trajectory_partitions)
        except (KafkaError, TimeoutError) as error:
            log.warning("scored-through claims skipped this round: %r", error)  # the broker away
            return
        by_partition = {tp.partition: offset for tp, offset in ends.items()}
        for partition, (through, idle, newest) in claims.items():
            claim = ScoredThrough(partition, partitions, through, by_partition, idle, newest)
            try:
                await scored.send(
                    key=str(partition).encode(), value=claim.encode(), partition=partition
                )
            except (KafkaError, ProducerSendError) as error:
                log.warning("a scored-through claim skipped: %r", error)

    async def commit_floors(state: LiveState | None) -> None:
        """Commit each partition's floor (``streams.commit_floor``) that moved, an events
        partition's with the event time below it (``streams.floor_commits``); the sink's rows
        first, so a committed event's rows are stored (unless the store is down)."""
        if state is None:
            return
        floors = state.floors(settings.events_topic, scorer_topic)
        events = {p for t, p in floors if t == settings.events_topic}
        if events and not await seed_progress(state, events):
            floors = {(t, p): at for (t, p), at in floors.items() if t != settings.events_topic}
        if not floors:
            return
        if buffer is not None:
            buffer.flush()
        offsets = {
            TP(t, p): (
                at,
                newest_metadata(state.progress.below_floor(p, at)) if p in events else "",
            )
            for (t, p), at in floors.items()
        }
        if await commit_with_metadata(app.consumer, offsets):
            state.committed.update(floors)

    @app.timer(interval=COMMIT_INTERVAL_S)
    async def commit_regularly() -> None:
        await commit_floors(generations.current(_generation(app)))

    @app.on_partitions_revoked.connect  # type: ignore[arg-type]
    async def commit_before_revoke(sender: Any, revoked: set[TP], **kwargs: Any) -> None:
        """The next owner (maybe this worker) reads again from the floors committed here."""
        await commit_floors(generations.current(_generation(app)))

    stalls: StallWatch[TP] = StallWatch(STALL_PATIENCE_S)

    @app.timer(interval=STALL_PATIENCE_S / 3)
    async def refetch_stalled_partitions() -> None:
        """An owned partition Faust stopped fetching is named and fetched again
        (``streams.stall_watch``)."""
        consumer = cast(Any, app.consumer)
        state = generations.current(_generation(app))
        streams = {
            tp for tp in consumer.assignment() if tp.topic in (settings.events_topic, scorer_topic)
        }
        stalls.keep_only(streams)
        if not streams or state is None:
            return
        try:
            ends = await consumer.highwaters(*streams)
        except (KafkaError, ConsumerNotStarted, TimeoutError):
            return  # the broker away: nothing is fetched anyway
        fetched = consumer._get_active_partitions()  # Faust 0.15: no public accessor
        now = time.monotonic()
        for tp in sorted(streams):
            reached = state.reached(settings.events_topic, scorer_topic, tp.topic, tp.partition)
            if stalls.stalled(tp, reached, ends.get(tp), tp in fetched, now):
                log.warning(
                    "%s:%d has records past offset %s (end %s) that Faust has not fetched for "
                    "%.0f s (paused: %s, buffer full: %s): fetching it again",
                    tp.topic, tp.partition, reached, ends.get(tp), STALL_PATIENCE_S,
                    tp in consumer._paused_partitions, tp in consumer._buffered_partitions,
                )  # fmt: skip
                consumer.resume_partitions({tp})
                consumer.on_buffer_drop(tp)

    @app.task
    async def sequence() -> None:
        await run_sequencer(settings, bootstrap, config, buffer, on_emitted=metrics.samples.inc)

    if buffer is not None:

        @app.agent(app.topic(settings.metrics_topic, key_type=bytes, value_type=bytes))
        async def train_steps(stream: faust.StreamT) -> None:
            """The trainer's rows reach ClickHouse only through forge.metrics."""
            async for event in stream.events():
                step = await letters.decoded(event.message, TrainStep)
                if step is not None:
                    buffer.add(train_steps=[step])

        @app.task
        async def flush_sink() -> None:
            """Batches reach ClickHouse every ``sink_flush_s`` (later while the store fails:
            ``SinkBuffer`` backs off), and once more at shutdown."""
            try:
                while True:
                    await asyncio.sleep(settings.sink_flush_s)
                    buffer.flush()
            finally:
                buffer.flush(force=True)

        sql = open_endpoint(settings, infra, before_query=buffer.flush)

        @app.page("/query/")
        async def query(web: Any, request: Any) -> Any:
            """Read-only SQL for other processes: this worker owns the embedded store."""
            reply = await sql.answer(
                request.headers.get("Authorization"), request.query.get("sql", "")
            )
            return web.json(reply.body, status=reply.status)

    return app


COMMIT_INTERVAL_S = 1.0
METADATA_TIMEOUT_S = 10.0
"""How long the broker may take to say what the events floors were committed with."""
STALL_PATIENCE_S = 30.0
"""How long an owned partition may go unfetched with records to read (``stall_watch``)."""
OPEN_ROLLOUT_LIMIT = 2
"""Group timeouts of event time after its start that a rollout not ended is let go at."""
MARK_KEEP = 3
"""Group timeouts past its deadline that a settled group's mark is kept: past the longest a
rollout is held open, so nothing of the group can arrive later."""


def _bundles_of(events_partition: int) -> tuple[str, int]:
    """The deliveries' tag of the bundles sent from one forge.events partition."""
    return ("bundles", events_partition)


def _generation(app: faust.App) -> int:
    return cast(int, app.consumer_generation_id)


def _scorers(state: LiveState | None) -> list[ScorerPartition]:
    return [] if state is None else list(state.scorers.values())


def ended_topic(app_id: str) -> str:
    return f"{app_id}.rollouts-ended"


def settled_topic(app_id: str) -> str:
    return f"{app_id}.groups-settled"


def internal_topics(app_id: str, partitions: int) -> tuple[TopicSpec, ...]:
    """The worker's internal topic (bundles of raw events), the marks of settled groups and
    the scored-through claims (the newest of each partition is all the sequencer needs)."""
    configs = {"compression.type": "zstd", "max.message.bytes": str(MAX_MESSAGE_BYTES)}
    compacted = {**configs, "cleanup.policy": "compact"}
    hourly = {**compacted, "segment.ms": "3600000"}  # a sequencer term reads all of it
    return (
        TopicSpec(ended_topic(app_id), Envelope, partitions, configs),
        TopicSpec(settled_topic(app_id), Envelope, partitions, compacted),
        TopicSpec(scored_through_topic(app_id), Envelope, partitions, hourly),
    )
