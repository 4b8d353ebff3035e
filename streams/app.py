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
  (``streams.claim_rounds``), the sequencer's watermark.
- ``sequence`` (a task over forge.queue, forge.trajectories, forge.policy and the claims): the
  event-time sequencer, active in one worker of the group at a time, fenced by the broker and
  exact across restarts by sample identity (``streams.live_sequencer``); it writes the
  rollouts table.
No table, no changelog: each input partition is the log of the state built from it, committed
only up to the first message of anything still held (``streams.floor_commits``) — Faust's own
acks and commits are off for these topics — and read again from there after a restart or a
rebalance (``streams.live_state``). Analytics rows go through ``streams.analytics_wiring``.
Undecodable records go to forge.dlq with the reason, and so do rollouts that cannot be scored:
larger than one message, with a non-finite reward input, ended after their group's timeout, or
never ended. This module only wires the pure cores.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from datetime import timedelta
from functools import partial
from typing import Any

import faust
from aiokafka.errors import KafkaError
from faust.exceptions import ConsumerNotStarted
from faust.types import TP

from infra.config import InfraSettings
from infra.kafka_clients import BATCH_BYTES, ensure_topics, topic_partitions
from infra.metrics_server import StreamsMetrics, serve_metrics
from infra.partitioner import RememberingPartitioner
from schemas import codec
from schemas.records import Envelope
from schemas.topics import DLQ, EVENTS, MAX_MESSAGE_BYTES, TRAJECTORIES
from streams import bundles
from streams.analytics_wiring import wire_analytics
from streams.claim_rounds import claim_scored_through
from streams.config import StreamsSettings, load_pipeline_config
from streams.dead_letters import DeadLetters
from streams.deliveries import Deliveries
from streams.faust_transport import (
    BATCHES_BUFFERED,
    BatchCountingMonitor,
    Transport,
    consumer_generation,
    current_records,
)
from streams.floor_commits import FloorCommits
from streams.group_scorer import GroupScorer
from streams.internal_topics import ended_topic, internal_topics, settled_topic
from streams.live_sequencer import run_sequencer
from streams.live_state import Generations, LiveState, ScorerPartition
from streams.open_rollouts import EndedRollout, OpenRollouts
from streams.scored_through import newest_claimed, scored_through_topic
from streams.settled_groups import SettledGroups, SettledMark, read_marks
from streams.sinks import call_rows
from streams.stall_refetch import refetch_stalled_partitions
from streams.watermarks import (
    TICK_HEADER,
    WATERMARK_HEADER,
    EventsProgress,
    SharedHorizon,
    Watermark,
    tick_horizon,
)

log = logging.getLogger(__name__)


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
    metrics = StreamsMetrics(
        app.monitor,
        events_topic=settings.events_topic,
        trajectories_topic=settings.trajectories_topic,
        open_groups=lambda: sum(
            s.groups.open_groups for s in _scorers(generations.current(consumer_generation(app)))
        ),
    )
    serve_metrics(metrics.registry, infra.metrics_port, infra.metrics_bind)
    letters = DeadLetters(dlq, settings.app_id)
    buffer = wire_analytics(app, settings, infra, letters)
    floor_commits = FloorCommits(
        app,
        bootstrap,
        events_topic=settings.events_topic,
        scorer_topic=scorer_topic,
        before_commit=None if buffer is None else buffer.flush,
    )

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

    async def send_watermark_round(state: LiveState) -> None:
        mine = owned(settings.events_topic)
        state.progress.keep_only(mine)
        if not await floor_commits.seed_progress(state, mine):
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
            state = generations.at(consumer_generation(app))
            if state is None:
                continue
            try:
                await send_watermark_round(state)
            except (KafkaError, ConsumerNotStarted, TimeoutError) as error:
                log.warning("watermarks skipped this round: %s", error)  # the broker away

    @app.timer(interval=settings.group_check_s)
    async def expire_groups() -> None:
        """Open groups past their timeout get a tick on their own partition (groups change
        only inside the agent), carrying the event time it may assume: the horizon of that
        partition; marks past keeping are forgotten, in the topic too."""
        state = generations.current(consumer_generation(app))
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

    @app.timer(interval=COMMIT_INTERVAL_S)
    async def commit_regularly() -> None:
        await floor_commits.commit(generations.current(consumer_generation(app)))

    @app.on_partitions_revoked.connect  # type: ignore[arg-type]
    async def commit_before_revoke(sender: Any, revoked: set[TP], **kwargs: Any) -> None:
        """The next owner (maybe this worker) reads again from the floors committed here."""
        await floor_commits.commit(generations.current(consumer_generation(app)))

    claim_scored_through(
        app,
        generations,
        scored,
        bootstrap=bootstrap,
        trajectories_topic=settings.trajectories_topic,
        partitions=partitions,
        group_check_s=settings.group_check_s,
    )
    refetch_stalled_partitions(app, generations, settings.events_topic, scorer_topic)

    @app.task
    async def sequence() -> None:
        await run_sequencer(settings, bootstrap, config, buffer, on_emitted=metrics.samples.inc)

    return app


COMMIT_INTERVAL_S = 1.0
OPEN_ROLLOUT_LIMIT = 2
"""Group timeouts of event time after its start that a rollout not ended is let go at."""
MARK_KEEP = 3
"""Group timeouts past its deadline that a settled group's mark is kept: past the longest a
rollout is held open, so nothing of the group can arrive later."""


def _bundles_of(events_partition: int) -> tuple[str, int]:
    """The deliveries' tag of the bundles sent from one forge.events partition."""
    return ("bundles", events_partition)


def _scorers(state: LiveState | None) -> list[ScorerPartition]:
    return [] if state is None else list(state.scorers.values())
