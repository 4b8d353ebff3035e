"""The worker's internal topics, named after its app id: the marks of settled groups and the
scored-through claims (``streams.event_time.scored_through``), partitioned as forge.events is when
the group first starts, and the watermarks (``streams.event_time.watermarks``), one partition, read
whole by every worker in the order they were written."""

from __future__ import annotations

from schemas.records import Envelope
from schemas.topics import MAX_MESSAGE_BYTES, TopicSpec
from streams.event_time.scored_through import scored_through_topic


def settled_topic(app_id: str) -> str:
    return f"{app_id}.groups-settled"


def watermarks_topic(app_id: str) -> str:
    return f"{app_id}.watermarks"


def internal_topics(app_id: str, partitions: int) -> tuple[TopicSpec, ...]:
    """Compacted, each: a group's newest mark, and the newest claim or watermark of each
    partition, is all a reader needs."""
    configs = {"compression.type": "zstd", "max.message.bytes": str(MAX_MESSAGE_BYTES)}
    compacted = {**configs, "cleanup.policy": "compact"}
    hourly = {**compacted, "segment.ms": "3600000"}  # a sequencer term reads all of it
    return (
        TopicSpec(settled_topic(app_id), Envelope, partitions, compacted),
        TopicSpec(scored_through_topic(app_id), Envelope, partitions, hourly),
        TopicSpec(watermarks_topic(app_id), Envelope, 1, hourly),
    )
