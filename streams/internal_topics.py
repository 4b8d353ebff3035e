"""The worker's internal topics, named after its app id: the bundles of ended rollouts (keyed
by group), the marks of settled groups, and the scored-through claims
(``streams.scored_through``). Each gets as many partitions as forge.events has when the group
first starts."""

from __future__ import annotations

from schemas.records import Envelope
from schemas.topics import MAX_MESSAGE_BYTES, TopicSpec
from streams.scored_through import scored_through_topic


def ended_topic(app_id: str) -> str:
    return f"{app_id}.rollouts-ended"


def settled_topic(app_id: str) -> str:
    return f"{app_id}.groups-settled"


def internal_topics(app_id: str, partitions: int) -> tuple[TopicSpec, ...]:
    """The bundles of raw events, the marks of settled groups and the claims (compacted: the
    newest of each partition is all the sequencer needs)."""
    configs = {"compression.type": "zstd", "max.message.bytes": str(MAX_MESSAGE_BYTES)}
    compacted = {**configs, "cleanup.policy": "compact"}
    hourly = {**compacted, "segment.ms": "3600000"}  # a sequencer term reads all of it
    return (
        TopicSpec(ended_topic(app_id), Envelope, partitions, configs),
        TopicSpec(settled_topic(app_id), Envelope, partitions, compacted),
        TopicSpec(scored_through_topic(app_id), Envelope, partitions, hourly),
    )
