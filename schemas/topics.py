"""Topic names, their record types and their configs — the one place they are defined."""

from __future__ import annotations

from dataclasses import dataclass, field

from schemas.records import (
    DeadLetter,
    Envelope,
    PolicyUpdated,
    QueueEntry,
    Record,
    TrainSample,
    TrainStep,
    Trajectory,
)

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""Largest record anywhere: a 200k-token prompt is ~0.8 MB packed, leaving ample headroom."""

_COMMON = {
    "compression.type": "zstd",
    "max.message.bytes": str(MAX_MESSAGE_BYTES),
}
_FOREVER = {"retention.ms": "-1", "retention.bytes": "-1"}


@dataclass(frozen=True)
class TopicSpec:
    name: str
    record: type[Record]
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    ordered: bool = False
    """Exactly one partition: its offsets are a global order that consumers rely on."""


EVENTS = TopicSpec("forge.events", Envelope, 4, {**_COMMON, **_FOREVER})
QUEUE = TopicSpec("forge.queue", QueueEntry, 1, {**_COMMON, **_FOREVER}, ordered=True)
# A rebuild of the sequencer reads queue, trajectories and policy from their beginning: they
# are kept as long as forge.events, which they are rebuilt from.
TRAJECTORIES = TopicSpec("forge.trajectories", Trajectory, 4, {**_COMMON, **_FOREVER})
TRAIN = TopicSpec("forge.train", TrainSample, 1, {**_COMMON, **_FOREVER}, ordered=True)
POLICY = TopicSpec("forge.policy", PolicyUpdated, 1, {**_COMMON, **_FOREVER})
METRICS = TopicSpec("forge.metrics", TrainStep, 1, {**_COMMON, **_FOREVER})
DLQ = TopicSpec("forge.dlq", DeadLetter, 1, {**_COMMON, **_FOREVER})

ALL_TOPICS: tuple[TopicSpec, ...] = (EVENTS, QUEUE, TRAJECTORIES, TRAIN, POLICY, METRICS, DLQ)
BY_NAME: dict[str, TopicSpec] = {t.name: t for t in ALL_TOPICS}


def derived_train_topic(name: str) -> TopicSpec:
    """A replay's output topic: configured like forge.train under another name."""
    return TopicSpec(name, TrainSample, 1, dict(TRAIN.configs), ordered=True)
