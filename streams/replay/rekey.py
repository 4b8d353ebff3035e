"""`forge-rl rekey-events`: a stretch of forge.events copied to a new topic keyed by each
rollout's group id, in the order it is read — a log written before it was keyed by group id
(keyed by rollout id: a group's members spread over partitions, which no one live worker can
score), or a log grown to more partitions (``--partitions``: in place, a group open across the
growth would be split). A replay reads either keying; the live worker needs the copy.

Two reads of the source: the first learns each rollout's group from its RolloutStarted, the
second copies every event under its group's key (a rollout with no start in the stretch keeps
its own id: the worker admits nothing of it either). Records that are no event are left out
and counted. The copy's record timestamps are the time it was written.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import replace

from infra.kafka_clients import (
    BATCH_BYTES,
    Delivered,
    ensure_topics,
    sync_producer,
    topic_partitions,
)
from infra.log_reader import LogRange, read_log
from schemas import codec
from schemas.records import Envelope, RolloutStarted
from schemas.topics import EVENTS, TopicSpec


def groups_of_rollouts(envelopes: Iterable[Envelope]) -> dict[str, str]:
    """Each rollout's group id, from its RolloutStarted (pure)."""
    return {
        e.rollout_id: e.payload.group_id for e in envelopes if isinstance(e.payload, RolloutStarted)
    }


def rekey_events(
    bootstrap: str, source: TopicSpec, target: str, span: LogRange, partitions: int | None = None
) -> Counter[str]:
    """Copy ``span`` of ``source`` to ``target`` (created with ``partitions``, default as many
    as the source has), keyed by group id: every group's events on one partition of the copy,
    however many it has; what was copied and left out, counted."""
    if target == source.name:
        raise ValueError(f"rekey-events copies {source.name} to another topic, not onto itself")

    def envelopes() -> Iterable[Envelope]:
        for read in read_log(bootstrap, source, span, name="forge-rl-rekey"):
            if isinstance(read, Delivered) and isinstance(read.record, Envelope):
                yield read.record

    groups = groups_of_rollouts(envelopes())
    partitions = partitions or len(topic_partitions(bootstrap, (source.name,))) or EVENTS.partitions
    ensure_topics(bootstrap, (replace(EVENTS, name=target, partitions=partitions),), timeout_s=30)
    counts: Counter[str] = Counter()
    producer = sync_producer(bootstrap, linger_ms=5, batch_size=BATCH_BYTES)
    try:
        for read in read_log(bootstrap, source, span, name="forge-rl-rekey"):
            if not isinstance(read, Delivered) or not isinstance(read.record, Envelope):
                counts["no event: left out"] += 1
                continue
            rollout = read.record.rollout_id
            counts["keyed by group" if rollout in groups else "no start: kept by rollout"] += 1
            key = groups.get(rollout, rollout)
            producer.send(target, codec.encode(read.record), key=key.encode())
        producer.flush()
    finally:
        producer.close()
    return counts
