"""The live Faust worker: assemble rollouts, score complete groups, sequence, sink.

- ``assemble`` (forge.events, keyed by rollout): each raw event is stored once in a table
  with a changelog, beside a small per-rollout index (dedup by event_id); when the rollout
  ends, its events go as one bundle to an internal topic keyed by group.
- ``score`` (internal topic, keyed by group): each member's bundle is stored once under its
  own key, next to the group's member list; a complete group is scored and its trajectories
  go to forge.trajectories (and the rollouts/calls tables).
- ``sequence`` (a task over forge.queue, forge.trajectories and forge.policy): the
  event-time sequencer, active in one worker of the group at a time, fenced by the broker and
  exact across restarts by sample identity (``streams.live_sequencer``).
Undecodable records go to forge.dlq with the reason.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import faust

from infra.analytics import analytics_client, ensure_tables
from infra.config import InfraSettings
from infra.kafka_clients import decode_message, ensure_topics
from schemas import codec
from schemas.records import (
    DeadLetter,
    Envelope,
    Record,
    TrainStep,
)
from schemas.topics import DLQ, MAX_MESSAGE_BYTES, TopicSpec
from streams import bundles
from streams.assembler import AssembledRollout, RolloutAssembly
from streams.config import StreamsSettings, load_pipeline_config
from streams.live_sequencer import run_sequencer
from streams.pipeline import settle_group
from streams.scoring import score_trajectories
from streams.sinks import (
    SinkBuffer,
    call_rows,
    insert_train_steps,
    rollout_row,
)
from streams.sql_endpoint import open_endpoint

log = logging.getLogger(__name__)
R = TypeVar("R", bound=Record)


def create_streams_app(
    settings: StreamsSettings, bootstrap: str, infra: InfraSettings
) -> faust.App:
    config = load_pipeline_config(settings.pipeline_file)
    app = faust.App(
        settings.app_id,
        broker=f"kafka://{bootstrap}",
        store="memory://",
        datadir=str(infra.home / "streams"),
        value_serializer="raw",
        key_serializer="raw",
        topic_replication_factor=1,
        topic_partitions=4,
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
        bootstrap, internal_topics(settings.app_id), timeout_s=infra.kafka_connect_timeout_s
    )
    ended = app.topic(ended_topic(settings.app_id), key_type=bytes, value_type=bytes,
                      partitions=4, internal=True)  # fmt: skip
    trajectories = app.topic(settings.trajectories_topic, key_type=bytes, value_type=bytes)
    dlq = app.topic(DLQ.name, key_type=bytes, value_type=bytes)
    # Keys and values are bytes on both sides: a str key would not survive changelog recovery.
    tables: dict[str, Any] = {
        "default": bytes,
        "partitions": 4,
        "key_type": bytes,
        "value_type": bytes,
    }
    rollout_index, rollout_events, group_members, member_bundles, scored_groups = (
        app.Table(t, **tables) for t in TABLES
    )
    group_timeout = timedelta(seconds=config.group_timeout_s)
    progress = _Progress()
    # Open groups decoded, so neither a member's arrival nor the timer decodes stored members.
    # The tables stay the truth: an entry is used only while it names the members listed.
    open_groups: dict[bytes, dict[str, _Member]] = {}

    def members_of(key: bytes) -> dict[str, _Member]:
        names = _names(group_members[key])
        cached = open_groups.get(key)
        if cached is None or cached.keys() != set(names):
            stored = (member_bundles[_member_key(key, name)] for name in names)
            cached = {name: _Member.of(bundle) for name, bundle in zip(names, stored, strict=True)}
            open_groups[key] = cached
        return cached

    def deadline_of(key: bytes) -> datetime:
        return min(m.assembled.started_ts for m in members_of(key).values()) + group_timeout

    sink = analytics_client(infra) if settings.sink else None
    buffer = SinkBuffer(sink) if sink is not None else None
    if sink is not None:
        ensure_tables(sink)

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
        """Each event is stored once under its own key, next to its rollout's small index;
        an ended rollout's events go on as one bundle to the group's partition of ``ended``."""
        async for event in stream.events():
            envelope = await decoded(event, Envelope)
            if envelope is None:
                continue
            rid = envelope.rollout_id
            index = bundles.RolloutIndex.from_bytes(rollout_index[rid.encode()])
            if index.admits(envelope):
                grown = index.with_event(envelope)
                if grown.complete:
                    assert grown.group_id is not None
                    stored = (rollout_events[_event_key(rid, e)] for e in index.event_ids)
                    bundle = bundles.pack((*stored, event.value))
                    await ended.send(key=grown.group_id.encode(), value=bundle)
                    if index.event_ids:  # the index first: it never names a missing event
                        del rollout_index[rid.encode()]
                        for event_id in index.event_ids:
                            del rollout_events[_event_key(rid, event_id)]
                else:  # the event first, then the index that names it
                    rollout_events[_event_key(rid, envelope.event_id)] = event.value
                    rollout_index[rid.encode()] = grown.to_bytes()
            progress.saw(envelope.ts)  # after its bundle is on its way to ``score``

    @app.agent(ended)
    async def score(stream: faust.StreamT) -> None:
        """Members arrive one bundle each; a message with a tick header is ``expire_groups``
        asking for the group's timeout to be checked against the event time it carries."""
        async for event in stream.events():
            key, tick = event.key, (event.headers or {}).get(TICK_HEADER)
            if scored_groups[key]:
                if tick is None:
                    await dead_letter(event.message, "member of a group scored at its timeout")
                continue
            stored = members_of(key)
            members = dict(stored)
            if event.value:
                arrived = _Member.of(event.value)
                members[arrived.assembled.rollout_id] = arrived
            if not members:
                continue
            horizon = _NEVER if tick is None else datetime.fromisoformat(bytes(tick).decode())
            assembled = [m.assembled for m in members.values()]
            settled = settle_group(assembled, horizon, group_timeout)
            if settled is None:
                if event.value:  # the bundle first: every listed member has one
                    member_bundles[_member_key(key, arrived.assembled.rollout_id)] = event.value
                    group_members[key] = _joined(members)
                open_groups[key] = members
                continue
            open_groups.pop(key, None)
            for late in settled.late:
                reason = f"rollout {late.rollout_id} ended after its group's timeout"
                raw = member_bundles[_member_key(key, late.rollout_id)] or event.value
                await dead_letter(event.message, reason, value=raw)
            scored = score_trajectories(settled.members, config.rewards, settled.completed_at)
            for trajectory in scored:
                await trajectories.send(key=key, value=codec.encode(trajectory))
            if buffer is not None:
                present = (members[m.rollout_id].events for m in settled.members)
                buffer.add([rollout_row(t, -1) for t in scored],
                           call_rows(e for m in present for e in m.events))  # fmt: skip
            if settled.timed_out:
                scored_groups[key] = b"1"
            if stored:  # the list first: a crash between the two leaves no dangling name
                del group_members[key]
                for name in stored:
                    del member_bundles[_member_key(key, name)]

    @app.timer(interval=settings.group_check_s)
    async def expire_groups() -> None:
        """Open groups past their timeout get a tick on their own partition (tables change
        only inside the agent owning the key), carrying the event time it may assume."""
        horizon = progress.horizon(settings)
        if horizon is None:
            return
        header = {TICK_HEADER: horizon.isoformat().encode()}
        for key, names in list(group_members.items()):
            if names and deadline_of(key) <= horizon:
                await ended.send(key=key, value=b"", headers=header)

    if sink is not None:

        @app.agent(app.topic(settings.metrics_topic, key_type=bytes, value_type=bytes))
        async def train_steps(stream: faust.StreamT) -> None:
            """The trainer's rows reach ClickHouse only through forge.metrics."""
            async for event in stream.events():
                step = await decoded(event, TrainStep)
                if step is not None:
                    insert_train_steps(sink, [step])

    @app.task
    async def sequence() -> None:
        await run_sequencer(settings, bootstrap, config, buffer)

    if buffer is not None:

        @app.task
        async def flush_sink() -> None:
            """Batches reach ClickHouse every ``sink_flush_s``, and once more at shutdown."""
            try:
                while True:
                    await asyncio.sleep(settings.sink_flush_s)
                    buffer.flush()
            finally:
                buffer.flush()

    if buffer is not None:
        sql = open_endpoint(settings, infra, before_query=buffer.flush)

        @app.page("/query/")
        async def query(web: Any, request: Any) -> Any:
            """Read-only SQL for other processes: this worker owns the embedded store."""
            reply = await sql.answer(
                request.headers.get("Authorization"), request.query.get("sql", "")
            )
            return web.json(reply.body, status=reply.status)

    return app


TABLES = ("rollout-index", "rollout-events", "group-members", "member-bundles", "scored-groups")
TICK_HEADER = "forge-group-tick"


def ended_topic(app_id: str) -> str:
    return f"{app_id}.rollouts-ended"


def internal_topics(app_id: str) -> tuple[TopicSpec, ...]:
    """The worker's internal topic and its tables' changelogs (bundles of raw events)."""
    configs = {"compression.type": "zstd", "max.message.bytes": str(MAX_MESSAGE_BYTES)}
    changelog = {**configs, "cleanup.policy": "compact"}
    return (
        TopicSpec(ended_topic(app_id), Envelope, 4, configs),
        *(TopicSpec(f"{app_id}-{table}-changelog", Envelope, 4, changelog) for table in TABLES),
    )


_NEVER = datetime.min.replace(tzinfo=UTC)


class _Progress:
    """How far in event time the assembler has got, for group timeouts.

    Event time, not the wall clock, drives them, as in a replay: while the worker works
    through a backlog (its newest event older than ``live_within_s``) no group times out;
    live, the horizon trails the newest event by ``lateness_s``; once the log has been quiet
    for ``idle_flush_s`` it is the newest event itself — a replay's end of the log.
    """

    def __init__(self) -> None:
        self.newest = _NEVER
        self.last_seen = time.monotonic()

    def saw(self, ts: datetime) -> None:
        self.newest = max(self.newest, ts)
        self.last_seen = time.monotonic()

    def horizon(self, settings: StreamsSettings) -> datetime | None:
        if self.newest == _NEVER:
            return None
        if time.monotonic() - self.last_seen > settings.idle_flush_s:
            return self.newest
        if self.newest.timestamp() > time.time() - settings.live_within_s:
            return self.newest - timedelta(seconds=settings.lateness_s)
        return None


@dataclass(frozen=True)
class _Member:
    """A group member's events, and its trajectory as assembled from them."""

    events: RolloutAssembly
    assembled: AssembledRollout

    @classmethod
    def of(cls, bundle: bytes) -> _Member:
        events = bundles.assembly_of(bundle)
        return cls(events, events.assemble())


def _event_key(rollout_id: str, event_id: str) -> bytes:
    return f"{rollout_id}\x00{event_id}".encode()


def _member_key(group: bytes, rollout_id: str) -> bytes:
    return group + b"\x00" + rollout_id.encode()


def _joined(members: dict[str, _Member]) -> bytes:
    return "\n".join(members).encode()


def _names(joined: bytes) -> list[str]:
    return joined.decode().split("\n") if joined else []
