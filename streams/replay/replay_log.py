"""`forge-rl replay`: the pipeline over a historical stretch of forge.events, into a new topic."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from clickhouse_connect.driver.client import Client

from infra.kafka_clients import BATCH_BYTES, Delivered, ensure_topics, sync_producer
from infra.log_reader import LogRange, read_log
from schemas import codec
from schemas.records import DeadLetter, Envelope, PolicyUpdated, QueueEntry
from schemas.topics import DLQ, EVENTS, POLICY, QUEUE, TopicSpec, derived_train_topic
from streams.analytics.sinks import (
    UNSET_STALENESS,
    call_rows,
    insert_calls,
    insert_rollouts,
    rollout_row,
)
from streams.pipeline_config import PipelineConfig
from streams.replay.pipeline import PipelineResult, process_log


@dataclass(frozen=True)
class ReplaySources:
    events: TopicSpec = EVENTS
    queue: TopicSpec = QUEUE
    policy: TopicSpec = POLICY


def _records(
    bootstrap: str, spec: TopicSpec, span: LogRange, dead: list[DeadLetter]
) -> Iterator[Delivered]:
    for result in read_log(bootstrap, spec, span, name="forge-rl-replay"):
        if isinstance(result, DeadLetter):
            dead.append(result)
        else:
            yield result


def run_replay(
    bootstrap: str,
    span: LogRange,
    out_topic: str,
    config: PipelineConfig,
    *,
    sources: ReplaySources = ReplaySources(),
    on_event: Callable[[int], None] | None = None,
    sink: Client | None = None,
) -> PipelineResult:
    """Re-run the processors over ``span`` of the events topic; write samples to ``out_topic``.

    With ``sink``, the rollouts and calls tables are (re)built from the same stretch of log.
    """
    dead: list[DeadLetter] = []
    envelopes: list[Envelope] = []
    for n, d in enumerate(_records(bootstrap, sources.events, span, dead), 1):
        if on_event is not None:
            on_event(n)
        assert isinstance(d.record, Envelope)
        envelopes.append(d.record)

    queue: list[tuple[int, QueueEntry]] = []
    for d in _records(bootstrap, sources.queue, LogRange(), dead):
        assert isinstance(d.record, QueueEntry)
        queue.append((d.offset, d.record))
    policies = []
    for d in _records(bootstrap, sources.policy, LogRange(), dead):
        assert isinstance(d.record, PolicyUpdated)
        policies.append(d.record)
    result = process_log(envelopes, queue, policies, config)
    if sink is not None:
        staleness = result.staleness
        rows = [
            rollout_row(t, staleness.get(t.rollout_id, UNSET_STALENESS))
            for t in result.trajectories
        ]
        result.stats["rollout_rows"] = insert_rollouts(sink, rows)
        result.stats["call_rows"] = insert_calls(sink, call_rows(envelopes))
    out = derived_train_topic(out_topic)
    ensure_topics(bootstrap, (out,), timeout_s=30)
    producer = sync_producer(bootstrap, linger_ms=5, batch_size=BATCH_BYTES)
    try:
        for letter in dead:
            producer.send(DLQ.name, codec.encode(letter), key=letter.key)
        for sample in result.samples:
            producer.send(out.name, codec.encode(sample), key=sample.sample_id.encode())
        producer.flush()
    finally:
        producer.close()
    result.stats["dead_letters"] = len(dead)
    return result
