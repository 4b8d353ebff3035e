"""The live Faust worker: one stage from forge.events to forge.trajectories, then sequence and
sink.

- ``process_events`` (``streams.stage.event_stage``; forge.events, keyed by group: every member
  of a group on one partition; read a fetched batch at a time, ``streams.faust_transport``): each
  record is decoded once and joins its partition's open rollouts and groups
  (``streams.stage.events_partition``); a group settles complete, or at its timeout once the
  horizon across all partitions (``streams.event_time.watermarks``, via a topic of their own:
  ``streams.event_time.watermark_rounds``) passes its deadline. Its trajectories, its mark and the
  partition's floor are committed in one Kafka transaction of the partition's own producer
  (``streams.stage.group_writes``), which fences the previous owner
  (``streams.stage.owned_partitions``); every ``group_check_s`` each partition claims how far its
  trajectories are written (``streams.event_time.claim_rounds``), the sequencer's watermark.
- ``sequence`` (a task over forge.queue, forge.trajectories, forge.policy and the claims): the
  event-time sequencer, active in one worker of the group at a time, fenced by the broker and
  exact across restarts by sample identity (``streams.sequencing.live_sequencer``); it writes the
  rollouts table.
No table, no changelog: each events partition is the log of the state built from it, committed
only up to the first record of a rollout whose group is not committed — Faust's own acks and
commits are off for it — and read again from there after a restart or a rebalance
(``streams.event_time.live_state``). Analytics rows go through
``streams.analytics.analytics_wiring``. Undecodable records go to forge.dlq with the reason, and so
do rollouts that cannot be scored: larger than one message, with a non-finite reward input, ended
after their group's timeout, never ended, or on a partition their group's id does not hash to (a
log keyed by rollout: rewrite it, ``forge-rl rekey-events``). This module only wires the agents,
tasks and timers, each a named function in the module of its job, to what they share.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

import faust
from faust.types import TP

from infra.config import InfraSettings
from infra.kafka_clients import (
    BATCH_BYTES,
    cluster_replication,
    ensure_topics,
    topic_partitions,
)
from infra.lifecycle import ensure_service_topics
from infra.metrics_server import StreamsMetrics, serve_metrics
from infra.partitioner import RememberingPartitioner
from schemas.errors import ConfigError
from schemas.topics import DLQ, EVENTS, MAX_MESSAGE_BYTES, TRAJECTORIES
from streams.analytics.analytics_wiring import wire_analytics
from streams.analytics.sinks import SinkBuffer
from streams.config import StreamsSettings, load_pipeline_config
from streams.event_time.claim_rounds import claim_scored_through
from streams.event_time.live_state import Generations, LiveState
from streams.event_time.scored_through import scored_through_topic
from streams.event_time.watermark_rounds import (
    add_watermark_follower,
    hear_watermarks,
    other_events_topics,
    send_watermarks,
)
from streams.event_time.watermarks import EventsProgress, SharedHorizon
from streams.faust_transport import (
    BATCHES_BUFFERED,
    RECORDS_PER_FETCH,
    BatchCountingMonitor,
    Transport,
    consumer_generation,
    request_rejoin,
)
from streams.internal_topics import internal_topics, settled_topic, watermarks_topic
from streams.pipeline_config import PipelineConfig
from streams.sequencing.live_sequencer import add_sequencer
from streams.stage.dead_letters import DeadLetters
from streams.stage.event_stage import EventStage, add_event_stage
from streams.stage.group_scorer import Settlement
from streams.stage.group_writes import Topics
from streams.stage.owned_partitions import OwnedPartitions, Takeover
from streams.stall_refetch import refetch_stalled_partitions
from streams.stalls import Stalls

log = logging.getLogger(__name__)

OPEN_ROLLOUT_LIMIT = 2
"""Group timeouts of event time after its start that a rollout not ended is let go at."""
MARK_KEEP = 3
"""Group timeouts past its deadline that a settled group's mark is kept: past the longest a
rollout is held open, so nothing of the group can arrive later."""


def create_streams_app(
    settings: StreamsSettings, bootstrap: str, infra: InfraSettings
) -> faust.App:
    """The worker's Faust app: its topics made sure of, then the stage, the watermarks and
    claims, the stall refetch and the sequencer wired to the collaborators they share."""
    config = load_pipeline_config(settings.pipeline_file)
    # forge.events and forge.trajectories made sure of before anything is read or written, at
    # the configured partitions; the internal topics are partitioned as forge.events is when
    # the group first starts: grown partitions need a new app_id.
    ensure_service_topics(infra, bootstrap, {
        EVENTS.name: settings.events_topic, TRAJECTORIES.name: settings.trajectories_topic,
    })  # fmt: skip
    partitions = len(topic_partitions(bootstrap, (settings.events_topic,)))
    app = _faust_app(settings, infra, bootstrap, partitions)
    _ensure_own_topics(settings, infra, bootstrap, partitions)
    topics = _Topics.declare(app, settings, partitions)
    generations = Generations(
        lambda generation: LiveState(generation, EventsProgress(settings.idle_flush_s))
    )
    horizon = SharedHorizon(timedelta(seconds=settings.lateness_s))
    horizon_moved = asyncio.Event()
    metrics = StreamsMetrics(
        app.monitor,
        events_topic=settings.events_topic,
        open_groups=lambda: sum(
            p.groups.open_groups for p in _partitions(generations.current(consumer_generation(app)))
        ),
    )
    serve_metrics(metrics.registry, infra.metrics_port, infra.metrics_bind)
    letters = DeadLetters(topics.dlq, settings.app_id)
    buffer = wire_analytics(app, settings, infra, letters)
    stalls = Stalls(settings.stall_limit_s)
    _add_health_page(app, stalls)
    owned = _owned_partitions(app, settings, bootstrap, config, letters, buffer, metrics, stalls)
    stage = EventStage(app, settings.events_topic, partitions, generations, horizon, owned,
                       letters, buffer, settings.max_unwritten_rollouts)  # fmt: skip
    add_event_stage(stage, topics.events, group_check_s=settings.group_check_s)
    send_watermarks(
        app, generations, owned.writer, events_topic=settings.events_topic,
        watermarks=topics.marks, group_check_s=settings.group_check_s, stalls=stalls,
    )  # fmt: skip
    add_watermark_follower(
        app, bootstrap, watermarks_topic(settings.app_id), settings.events_topic, horizon,
        horizon_moved, hear_watermarks(stalls, partitions),
    )  # fmt: skip
    claim_scored_through(
        app, generations, topics.claims, horizon, horizon_moved, bootstrap=bootstrap,
        trajectories_topic=settings.trajectories_topic, partitions=partitions,
        group_check_s=settings.group_check_s,
    )  # fmt: skip
    refetch_stalled_partitions(app, generations, settings.events_topic)
    add_sequencer(
        app, settings, bootstrap, config, buffer, on_emitted=metrics.samples.inc, stalls=stalls
    )
    return app


def _add_health_page(app: faust.App, stalls: Stalls) -> None:
    @app.page("/health")
    async def health(web: Any, request: Any) -> Any:
        """200 while every stage moves; 503 naming each stage stalled (``streams.stalls``)."""
        stalled = stalls.stalled(time.monotonic())
        body = {"status": "stalled" if stalled else "ok", "stalled": stalled}
        return web.json(body, status=503 if stalled else 200)


def _faust_app(
    settings: StreamsSettings, infra: InfraSettings, bootstrap: str, partitions: int
) -> faust.App:
    factor, _ = cluster_replication(bootstrap, infra.kafka_connect_timeout_s, infra.replication)
    app = faust.App(
        settings.app_id,
        broker=f"kafka://{bootstrap}",
        store="memory://",
        datadir=str(infra.home / "streams"),
        value_serializer="raw",
        key_serializer="raw",
        topic_replication_factor=factor,
        topic_partitions=partitions,
        web_host="127.0.0.1",
        web_bind=settings.web_bind,
        web_port=settings.web_port,
        producer_max_request_size=MAX_MESSAGE_BYTES,
        producer_max_batch_size=BATCH_BYTES,
        producer_partitioner=RememberingPartitioner(),
        consumer_max_fetch_size=MAX_MESSAGE_BYTES * 2,
        broker_max_poll_records=RECORDS_PER_FETCH,
        processing_guarantee="at_least_once",
        # A worker killed with -9 holds its partitions until its session expires.
        broker_session_timeout=10.0,
        broker_heartbeat_interval=3.0,
        Monitor=BatchCountingMonitor,
    )
    app.transport = Transport(
        app.conf.broker_consumer, app, batched_topics=(settings.events_topic,)
    )
    return app


def _ensure_own_topics(
    settings: StreamsSettings, infra: InfraSettings, bootstrap: str, partitions: int
) -> None:
    """The internal topics created up front; an app id that served another events topic
    refused."""
    ensure_topics(
        bootstrap, internal_topics(settings.app_id, partitions),
        timeout_s=infra.kafka_connect_timeout_s, replication=infra.replication,
    )  # fmt: skip
    others = other_events_topics(
        bootstrap, watermarks_topic(settings.app_id), settings.events_topic
    )
    if others:
        raise ConfigError(
            f"app id {settings.app_id} has served events topic {', '.join(sorted(others))}: its "
            f"marks, floors and watermarks are that topic's; run {settings.events_topic} under a "
            "new FORGE_STREAMS_APP_ID"
        )


@dataclass(frozen=True)
class _Topics:
    events: faust.TopicT
    marks: faust.TopicT
    claims: faust.TopicT
    dlq: faust.TopicT

    @classmethod
    def declare(cls, app: faust.App, settings: StreamsSettings, partitions: int) -> _Topics:
        # acks=False: Faust never commits it; the floors are committed in the groups'
        # transactions.
        return cls(
            events=app.topic(settings.events_topic, key_type=bytes, value_type=bytes,
                             acks=False, maxsize=BATCHES_BUFFERED),
            marks=app.topic(watermarks_topic(settings.app_id), key_type=bytes,
                            value_type=bytes, partitions=1, internal=True),
            claims=app.topic(scored_through_topic(settings.app_id), key_type=bytes,
                             value_type=bytes, partitions=partitions, internal=True),
            dlq=app.topic(DLQ.name, key_type=bytes, value_type=bytes),
        )  # fmt: skip


def _owned_partitions(
    app: faust.App,
    settings: StreamsSettings,
    bootstrap: str,
    config: PipelineConfig,
    letters: DeadLetters,
    buffer: SinkBuffer | None,
    metrics: StreamsMetrics,
    stalls: Stalls,
) -> OwnedPartitions:
    timeout = config.longest_group_timeout

    def committed(settlements: list[Settlement]) -> None:
        metrics.trajectories.inc(sum(len(s.trajectories) for s in settlements))

    return OwnedPartitions(
        Takeover(
            bootstrap, settings.app_id, settings.app_id, settings.events_topic,
            Topics(settings.trajectories_topic, settled_topic(settings.app_id)),
            config, OPEN_ROLLOUT_LIMIT * timeout, MARK_KEEP * timeout,
        ),
        letters,
        None if buffer is None else partial(_stored, buffer),
        committed,
        owns=lambda partition: TP(settings.events_topic, partition) in app.consumer.assignment(),
        rejoin=partial(request_rejoin, app), stalls=stalls,
    )  # fmt: skip


async def _stored(buffer: SinkBuffer) -> None:
    """Every calls row added so far is in the store: a group's transaction waits for its
    rows, since once it commits the group is never read again."""
    buffer.flush()
    stored: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    buffer.after_stored(partial(stored.set_result, None))
    await stored


def _partitions(state: LiveState | None) -> list[Any]:
    return [] if state is None else list(state.partitions.values())
