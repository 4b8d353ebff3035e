"""What a live worker that stopped short left behind, for a test's failure message: each
rollout in forge.events without a trajectory, with its events and whether its group was marked
settled. A stall after a kill -9 is rare (3 in
13 runs of the streams worker tests when it was seen) and cannot be rerun to order, so the failure
has to carry the evidence."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from kafka import TopicPartition

from infra.kafka_clients import Delivered, admin_client, sync_consumer
from infra.log_reader import LogRange, read_log
from schemas.records import Envelope, RolloutStarted, Trajectory
from schemas.topics import EVENTS, TRAJECTORIES, TopicSpec
from streams.internal_topics import settled_topic


def topic_messages(kafka: str, topic: str) -> list:  # type: ignore[type-arg]
    """Raw messages of a topic of bytes (the scorer's topic, the marks)."""
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
    scored = {
        d.record.rollout_id
        for d in read_log(kafka, TopicSpec(env["FORGE_STREAMS_TRAJECTORIES_TOPIC"], Trajectory,
                                           TRAJECTORIES.partitions), LogRange())
        if isinstance(d, Delivered) and isinstance(d.record, Trajectory)
    }  # fmt: skip
    events: dict[str, list[str]] = defaultdict(list)
    groups: dict[str, str] = {}
    spec = TopicSpec(env["FORGE_STREAMS_EVENTS_TOPIC"], Envelope, EVENTS.partitions)
    for d in read_log(kafka, spec, LogRange()):
        if not isinstance(d, Delivered) or not isinstance(d.record, Envelope):
            continue  # garbage a test wrote on purpose
        e = d.record
        events[e.rollout_id].append(f"{e.kind.name}@{d.partition}:{d.offset}")
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
        "committed offsets: " + ", ".join(
            f"{tp.topic}:{tp.partition}={meta.offset}"
            for offsets in committed.values()
            for tp, meta in sorted(offsets.items())
        ),
    ]  # fmt: skip
    marks = topic_messages(kafka, settled_topic(app))
    for rid in unscored[:6]:
        group = groups.get(rid, "?")
        lines.append(f"{rid} (group {group}): {' '.join(events[rid])}")
        marked = [
            f"p{m.partition}@{m.offset}{'' if m.value else ' (forgotten)'}"
            for m in marks
            if m.key == group.encode()
        ]
        lines.append(f"  {settled_topic(app)}: its group marked at {' '.join(marked) or 'nowhere'}")
    return "\n".join(lines)
