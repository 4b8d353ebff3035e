"""What a live worker that stopped short left behind, for a test's failure message: each
rollout in forge.events without a trajectory, with its events and what the worker's table
changelogs hold of it and its group. A stall after a kill -9 is rare (1 in about 10 runs of
the restart tests) and cannot be rerun to order, so the failure has to carry the evidence."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from kafka import TopicPartition

from infra.kafka_clients import admin_client, sync_consumer
from schemas import codec
from schemas.errors import SchemaError
from schemas.records import Envelope, RolloutStarted, Trajectory
from streams.app import ended_topic
from streams.tables import TABLES


def _messages(kafka: str, topic: str) -> list:  # type: ignore[type-arg]
    consumer = sync_consumer(kafka, enable_auto_commit=False)
    try:
        parts = [
            TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())
        ]
        if not parts:
            return []
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        ends = consumer.end_offsets(parts)
        out = []
        while any(consumer.position(tp) < ends[tp] for tp in parts):
            for batch in consumer.poll(timeout_ms=500).values():
                out += batch
        return out
    finally:
        consumer.close()


def stall_report(kafka: str, env: Mapping[str, str]) -> str:
    app = env["FORGE_STREAMS_APP_ID"]
    scored = set()
    for m in _messages(kafka, env["FORGE_STREAMS_TRAJECTORIES_TOPIC"]):
        scored.add(codec.decode(m.value, Trajectory).rollout_id)
    events: dict[str, list[str]] = defaultdict(list)
    groups: dict[str, str] = {}
    for m in _messages(kafka, env["FORGE_STREAMS_EVENTS_TOPIC"]):
        try:
            e = codec.decode(m.value, Envelope)
        except SchemaError:
            continue
        events[e.rollout_id].append(f"{e.kind.name}@{m.partition}:{m.offset}")
        if isinstance(e.payload, RolloutStarted):
            groups[e.rollout_id] = e.payload.group_id
    unscored = sorted(set(events) - scored)
    admin = admin_client(kafka, 30)
    try:
        committed = admin.list_group_offsets(app)
    finally:
        admin.close()
    lines = [
        f"unscored rollouts: {unscored}",
        f"committed offsets: {committed!r}"[:800],
    ]  # fmt: skip
    changelogs = {t: _messages(kafka, f"{app}-{t}-changelog") for t in TABLES}
    ended = _messages(kafka, ended_topic(app))
    for rid in unscored[:6]:
        group = groups.get(rid, "?")
        lines.append(f"{rid} (group {group}): {' '.join(events[rid])}")
        for table, messages in changelogs.items():
            keys = (rid.encode(), f"{rid}\0".encode(), group.encode(), f"{group}\0".encode())
            hits = [
                f"{m.key.decode(errors='replace')}@{m.offset}{'' if m.value else ' (deleted)'}"
                for m in messages
                if m.key and any(m.key == k or (k.endswith(b"\0") and m.key.startswith(k))
                                 for k in keys)
            ]  # fmt: skip
            lines.append(f"  {table}: {' '.join(hits) or 'nothing'}")
        sent = [
            f"p{m.partition}@{m.offset}"
            for m in ended
            if m.key == group.encode() and rid.encode() in m.value
        ]
        lines.append(f"  {ended_topic(app)}: its bundle at {' '.join(sent) or 'nowhere'}")
    return "\n".join(lines)
