"""The live Faust worker: assemble rollouts, score complete groups, sequence, sink.

- ``assemble`` (forge.events, keyed by rollout): each raw event is stored once in a table
  with a changelog, beside a small per-rollout index (dedup by event_id); when the rollout
  ends, its events go as one bundle to an internal topic keyed by group.
- ``score`` (internal topic, keyed by group): each member's bundle is stored once under its
  own key, next to the group's member list; a complete group is scored and its trajectories
  go to forge.trajectories (and their calls to the calls table).
- ``sequence`` (a task over forge.queue, forge.trajectories and forge.policy): the
  event-time sequencer, active in one worker of the group at a time, fenced by the broker and
  exact across restarts by sample identity (``streams.live_sequencer``); it writes the
  rollouts table.
Undecodable records go to forge.dlq with the reason, and so do rollouts that cannot be scored:
larger than one message, with a non-finite reward input, or ended after their group's timeout.
The tables' protocol lives in ``streams.tables``, the settle rule in ``streams.groups``, the
event time timeouts are judged at in ``streams.watermarks``; this module only wires them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast

import faust
from aiokafka.errors import KafkaError
from faust.exceptions import ConsumerNotStarted
from faust.types import TP

from infra.analytics import analytics_client, ensure_tables
from infra.config import InfraSettings
from infra.kafka_clients import decode_message, ensure_topics, topic_partitions
from infra.metrics_server import StreamsMetrics, serve_metrics
from schemas import codec
from schemas.records import DeadLetter, Envelope, Record, TrainStep
from schemas.topics import DLQ, EVENTS, MAX_MESSAGE_BYTES, TopicSpec
from streams import bundles
from streams.after_commit import AfterCommit
from streams.config import StreamsSettings, load_pipeline_config
from streams.groups import GroupScorer
from streams.live_sequencer import run_sequencer
from streams.recovery_seek import read_unknown_starts_from_the_beginning
from streams.sinks import SinkBuffer, call_rows
from streams.sql_endpoint import open_endpoint
from streams.stall_watch import StallWatch
from streams.tables import TABLES, GroupTables, OpenRollouts
from streams.watermarks import (
    WATERMARK_HEADER,
    EventsProgress,
    SharedHorizon,
    Watermark,
    combined,
)

log = logging.getLogger(__name__)
R = TypeVar("R", bound=Record)


class FlushSinkBeforeCommit(faust.Sensor):  # type: ignore[misc]
    """Inserts the buffered rows as a commit begins, before it takes the acknowledged offsets:
    a committed event's rows are stored (unless the store is down: then they wait in the
    buffer), so a kill -9 right after a commit no longer loses the calls rows of a group whose
    bundles will not be read again."""

    def __init__(self, buffer: SinkBuffer) -> None:
        super().__init__()
        self.buffer = buffer

    def on_commit_initiated(self, consumer: Any) -> None:
        self.buffer.flush()


def create_streams_app(
    settings: StreamsSettings, bootstrap: str, infra: InfraSettings
) -> faust.App:
    config = load_pipeline_config(settings.pipeline_file)
    read_unknown_starts_from_the_beginning()  # a broker restart crashed Faust's recovery
    # The tables are partitioned as forge.events is (the assembler writes them keyed by
    # rollout), and the scorer's topic alike: grown partitions need a new app_id.
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
        consumer_max_fetch_size=MAX_MESSAGE_BYTES * 2,
        processing_guarantee="at_least_once",
        # A worker killed with -9 holds its partitions until its session expires.
        broker_session_timeout=10.0,
        broker_heartbeat_interval=3.0,
    )
    events = app.topic(settings.events_topic, key_type=bytes, value_type=bytes)
    # Faust's assignor ignores a topic missing from metadata at the first rebalance; on a loaded
    # machine that once lost the bundles sent meanwhile. Created up front, nothing is missing.
    ensure_topics(
        bootstrap,
        internal_topics(settings.app_id, partitions),
        timeout_s=infra.kafka_connect_timeout_s,
    )
    ended = app.topic(ended_topic(settings.app_id), key_type=bytes, value_type=bytes,
                      partitions=partitions, internal=True)  # fmt: skip
    trajectories = app.topic(settings.trajectories_topic, key_type=bytes, value_type=bytes)
    dlq = app.topic(DLQ.name, key_type=bytes, value_type=bytes)
    # Keys and values are bytes on both sides: a str key would not survive changelog recovery.
    tables: dict[str, Any] = {
        "default": bytes,
        "partitions": partitions,
        "key_type": bytes,
        "value_type": bytes,
    }
    rollout_index, rollout_events, group_members, member_bundles, scored_groups = (
        app.Table(t, **tables) for t in TABLES
    )
    rollouts = OpenRollouts(rollout_index, rollout_events)
    groups = GroupScorer(
        GroupTables(group_members, member_bundles, scored_groups),
        timedelta(seconds=config.group_timeout_s),
        config.rewards,
    )
    metrics = StreamsMetrics(
        app.monitor,
        events_topic=settings.events_topic,
        trajectories_topic=settings.trajectories_topic,
        open_groups=lambda: len(groups.tables.open_groups()),
    )
    serve_metrics(metrics.registry, infra.metrics_port, infra.metrics_bind)
    progress = EventsProgress(settings.idle_flush_s)
    lateness = timedelta(seconds=settings.lateness_s)
    horizons: dict[int, SharedHorizon] = {}
    """Per partition of ``ended`` this worker scores, its view of every events partition."""
    sink = analytics_client(infra) if settings.sink else None
    buffer = SinkBuffer(sink) if sink is not None else None
    if sink is not None:
        ensure_tables(sink)
    if buffer is not None:
        app.sensors.add(FlushSinkBeforeCommit(buffer))

    closing: AfterCommit[str] = AfterCommit()
    """Ended rollouts, held until the message that ended them is committed."""
    forgetting: AfterCommit[bytes] = AfterCommit()
    """Settled groups, held until the message that settled them is committed."""
    unswept: set[int] = set()
    """forge.events partitions gained whose ended rollouts (a previous owner's) are not held."""
    owned_before: set[TP] = set()

    def committed(tp: TP) -> int | None:
        """The partition's committed offset (the next a restart reads). Faust 0.15 keeps it as
        it commits, with no public accessor."""
        offsets = cast(Any, app.consumer)._committed_offset
        return cast(int | None, offsets.get(tp))

    async def held_for_owned_partitions(sender: Any, assigned: set[TP], **kwargs: Any) -> None:
        """Deletions held for partitions lost are dropped (their new owner finds the state in
        the tables); a gained events partition's ended rollouts are looked for on its first
        event, once its tables are recovered."""
        gained = assigned - owned_before
        owned_before.clear()
        owned_before.update(assigned)
        closing.keep_only(tp.partition for tp in assigned if tp.topic == settings.events_topic)
        unswept.update(tp.partition for tp in gained if tp.topic == settings.events_topic)
        scorer_topic = ended_topic(settings.app_id)
        groups.drop(
            forgetting.keep_only(tp.partition for tp in assigned if tp.topic == scorer_topic)
        )

    def close_committed_rollouts(message: Any) -> None:
        if message.partition in unswept:
            unswept.discard(message.partition)
            for offset, rollout_id in rollouts.ended_in(message.partition):
                closing.hold(message.partition, offset, rollout_id)
        for rollout_id in closing.release(message.partition, committed(message.tp)):
            rollouts.close(rollout_id)

    async def send_dead_letter(letter: DeadLetter) -> None:
        """Acknowledged before the agent moves on: nothing is dropped silently."""
        await (await dlq.send(key=letter.key, value=codec.encode(letter)))

    async def dead_letter(message: Any, reason: str, value: bytes | None = None) -> None:
        await send_dead_letter(DeadLetter(
            source_topic=message.topic, partition=message.partition, offset=message.offset,
            reason=reason, consumer=settings.app_id, ts=datetime.now(UTC),
            key=message.key, value=message.value if value is None else value,
        ))  # fmt: skip

    async def decoded(event: Any, record_type: type[R]) -> R | None:
        """The event's record, or None once it is in forge.dlq with the reason (the one
        decode-or-dead-letter rule, ``decode_message``, tombstones included)."""
        message = event.message
        result = decode_message(
            TopicSpec(message.topic, record_type, 1), partition=message.partition,
            offset=message.offset, key=message.key, value=event.value, consumer=settings.app_id,
        )  # fmt: skip
        if isinstance(result, DeadLetter):
            await send_dead_letter(result)
            return None
        assert isinstance(result.record, record_type)
        return result.record

    @app.agent(events)
    async def assemble(stream: faust.StreamT) -> None:
        """Each event is stored once; an ended rollout's events go on as one bundle to the
        group's partition of ``ended`` — or, larger than a message, to forge.dlq."""
        async for event in stream.events():
            message = event.message
            close_committed_rollouts(message)
            envelope = await decoded(event, Envelope)
            if envelope is None:
                progress.processed(message.partition, message.offset, None, time.monotonic())
                continue
            done = rollouts.add(envelope, event.value, message.partition, message.offset)
            if done is not None:
                reason = bundles.oversize(done.rollout_id, len(done.bundle))
                if reason is None:
                    await ended.send(key=done.group, value=done.bundle)
                else:
                    await dead_letter(message, reason)
                rollouts.end(done.rollout_id, message.partition, message.offset)
                closing.hold(message.partition, message.offset, done.rollout_id)
            # After its bundle is on its way: a watermark sent later follows it in the log.
            progress.processed(event.message.partition, event.message.offset, envelope.ts,
                               time.monotonic())  # fmt: skip

    @app.agent(ended)
    async def score(stream: faust.StreamT) -> None:
        """Members arrive one bundle each; a message with a tick header is ``expire_groups``
        asking for the group's timeout to be checked against the event time it carries, one
        with a watermark header an events partition's progress (``send_watermarks``)."""
        async for event in stream.events():
            message = event.message
            for group in forgetting.release(message.partition, committed(message.tp)):
                groups.forget(group)
            headers = event.headers or {}
            try:
                mark = headers.get(WATERMARK_HEADER)
                if mark is not None:
                    horizon_of(event.message.partition).saw(Watermark.decode(bytes(mark)))
                    continue
                tick = headers.get(TICK_HEADER)
                horizon = None if tick is None else datetime.fromisoformat(bytes(tick).decode())
            except ValueError as error:
                await dead_letter(event.message, f"bad control header: {error}")
                continue
            settled = groups.offer(event.key, event.value, horizon)
            if settled is None:
                continue
            for bundle, reason in settled.dead:
                await dead_letter(event.message, reason, value=bundle)
            for trajectory in settled.trajectories:
                await trajectories.send(key=event.key, value=codec.encode(trajectory))
            if buffer is not None:  # rollout rows come from the sequencer: the first scoring
                buffer.add(calls=call_rows(e for m in settled.present for e in m.events.events))
            groups.close(event.key, settled)
            if settled.closes:
                forgetting.hold(message.partition, message.offset, event.key)

    def horizon_of(partition: int) -> SharedHorizon:
        return horizons.setdefault(partition, SharedHorizon(lateness))

    def owned(topic: str) -> set[int]:
        return {tp.partition for tp in app.consumer.assignment() if tp.topic == topic}

    async def send_watermark_round() -> None:
        mine = owned(settings.events_topic)
        progress.keep_only(mine)
        tps = [TP(settings.events_topic, p) for p in sorted(mine)]
        if not tps:
            return
        ends = await app.consumer.highwaters(*tps)  # asked of the broker now, not cached
        sent = []
        for tp in tps:
            position = await app.consumer.position(tp)
            mark = progress.mark(tp.partition, ends.get(tp), position, time.monotonic())
            header = {WATERMARK_HEADER: mark.encode()}
            for target in range(partitions):
                sent.append(await ended.send(value=b"", partition=target, headers=header))
        await asyncio.gather(*sent)

    @app.task
    async def send_watermarks() -> None:
        """Every ``group_check_s``, every events partition this worker owns tells every
        partition of ``ended`` how far it is processed (``streams.watermarks``); each round is
        written before the next one's check, as the horizon's rule needs."""
        while True:
            await asyncio.sleep(settings.group_check_s)
            try:
                await send_watermark_round()
            except (KafkaError, ConsumerNotStarted, TimeoutError) as error:
                log.warning("watermarks skipped this round: %s", error)  # the broker away

    @app.timer(interval=settings.group_check_s)
    async def expire_groups() -> None:
        """Open groups past their timeout get a tick on their own partition (tables change
        only inside the agent owning the key), carrying the event time it may assume: the
        shared horizon of every partition of ``ended`` this worker scores."""
        scored = owned(ended_topic(settings.app_id))
        for partition in set(horizons) - scored:
            del horizons[partition]
        horizon = combined([horizon_of(p).horizon(partitions) for p in sorted(scored)])
        if horizon is None:
            return
        header = {TICK_HEADER: horizon.isoformat().encode()}
        for key in groups.due(horizon):
            await ended.send(key=key, value=b"", headers=header)

    stalls: StallWatch[TP] = StallWatch(STALL_PATIENCE_S)

    @app.timer(interval=STALL_PATIENCE_S / 3)
    async def refetch_stalled_partitions() -> None:
        """An owned partition Faust stopped fetching is named and fetched again
        (``streams.stall_watch``); never while a table recovery runs. Faust's rebalancing
        flag is no guard: its recovery, finding a newer generation, returns without clearing
        it (faust/tables/recovery.py), and a first version guarded by it never ran in a
        stall."""
        consumer = cast(Any, app.consumer)
        if app.in_recovery:
            return
        streams = {tp for tp in consumer.assignment() if not tp.topic.endswith("-changelog")}
        stalls.keep_only(streams)
        if not streams:
            return
        try:
            ends = await consumer.highwaters(*streams)
        except (KafkaError, ConsumerNotStarted, TimeoutError):
            return  # the broker away: nothing is fetched anyway
        fetched = consumer._get_active_partitions()  # Faust 0.15: no public accessor
        now = time.monotonic()
        for tp in sorted(streams):
            if stalls.stalled(tp, committed(tp), ends.get(tp), tp in fetched, now):
                log.warning(
                    "%s:%d has records past offset %s (end %s) that Faust has not fetched for "
                    "%.0f s (paused: %s, buffer full: %s): fetching it again",
                    tp.topic, tp.partition, committed(tp), ends.get(tp), STALL_PATIENCE_S,
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
                step = await decoded(event, TrainStep)
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


TICK_HEADER = "forge-group-tick"
STALL_PATIENCE_S = 30.0
"""How long an owned partition may go unfetched with records to read (``stall_watch``)."""


def ended_topic(app_id: str) -> str:
    return f"{app_id}.rollouts-ended"


def internal_topics(app_id: str, partitions: int) -> tuple[TopicSpec, ...]:
    """The worker's internal topic and its tables' changelogs (bundles of raw events)."""
    configs = {"compression.type": "zstd", "max.message.bytes": str(MAX_MESSAGE_BYTES)}
    changelog = {**configs, "cleanup.policy": "compact"}
    return (
        TopicSpec(ended_topic(app_id), Envelope, partitions, configs),
        *(
            TopicSpec(f"{app_id}-{table}-changelog", Envelope, partitions, changelog)
            for table in TABLES
        ),
    )
