"""A log written before forge.events was keyed by group id (keyed by rollout id, a group's
members spread over partitions) replays to the same forge.train as the same events keyed by
group: the replay reads every partition and orders by event time, not by placement."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from infra.kafka_clients import Delivered, ensure_topics, sync_producer, topic_partitions
from infra.log_reader import LogRange, read_log
from infra.partitioner import RememberingPartitioner
from schemas import codec
from schemas.records import Envelope
from schemas.topics import EVENTS, POLICY, QUEUE, TopicSpec
from streams.pipeline_config import PipelineConfig
from streams.replay.pipeline import process_log
from streams.replay.rekey import rekey_events
from streams.replay.replay_log import ReplaySources, run_replay
from tests.integration.test_streams_worker import send_events, synthetic_log, train_samples

pytestmark = [pytest.mark.integration]


def logged(kafka: str, per_rollout, queue, *, by_rollout: bool) -> ReplaySources:
    suffix = uuid.uuid4().hex[:8]
    specs = [TopicSpec(f"test.keying.{s.name}.{suffix}", s.record, s.partitions, s.configs)
             for s in (EVENTS, QUEUE, POLICY)]  # fmt: skip
    ensure_topics(kafka, specs, timeout_s=30)
    events, queue_spec, policy = specs
    producer = sync_producer(kafka)
    for _, entry in queue:
        producer.send(queue_spec.name, codec.encode(entry), key=entry.rollout_id.encode())
    send_events(producer, events.name, per_rollout, queue, by_rollout=by_rollout)
    producer.flush()
    producer.close()
    return ReplaySources(events, queue_spec, policy)


def test_a_log_keyed_by_rollout_replays_to_what_the_same_log_keyed_by_group_does(kafka):
    per_rollout, queue = synthetic_log(48, 4, unfinished=frozenset({5, 17}))
    config = PipelineConfig(item_timeout_s=30.0, group_timeout_s=6.0)
    reference = process_log([e for r in per_rollout for e in r], queue, [], config).samples
    partition_of, partitions = RememberingPartitioner(), list(range(EVENTS.partitions))
    placed: dict[str, set[int]] = {}
    for _, entry in queue:
        by_rollout = partition_of(entry.rollout_id.encode(), partitions, partitions)
        placed.setdefault(entry.group_id, set()).add(by_rollout)
    assert any(len(p) > 1 for p in placed.values()), "no group spread: not the case tested"
    samples = {}
    for by_rollout in (False, True):
        out = f"test.keying.train.{uuid.uuid4().hex[:8]}"
        sources = logged(kafka, per_rollout, queue, by_rollout=by_rollout)
        run_replay(kafka, LogRange(), out, config, sources=sources)
        samples[by_rollout] = train_samples(kafka, out)
    assert samples[True] == samples[False] == reference


@pytest.mark.parametrize("partitions", [None, 16])
def test_a_log_keyed_by_rollout_rekeyed_puts_each_group_on_one_partition_and_replays_the_same(
    kafka, partitions
):
    """What the live worker's dead letter for such a log names: `forge-rl rekey-events`; with
    ``--partitions``, how a log grows to more partitions."""
    per_rollout, queue = synthetic_log(48, 4, unfinished=frozenset({5, 17}))
    config = PipelineConfig(item_timeout_s=30.0, group_timeout_s=6.0)
    reference = process_log([e for r in per_rollout for e in r], queue, [], config).samples
    old = logged(kafka, per_rollout, queue, by_rollout=True)
    copy = f"test.keying.rekeyed.{uuid.uuid4().hex[:8]}"
    with pytest.raises(ValueError):
        rekey_events(kafka, old.events, old.events.name, LogRange())
    counts = rekey_events(kafka, old.events, copy, LogRange(), partitions)
    assert len(topic_partitions(kafka, (copy,))) == (partitions or old.events.partitions)
    assert counts == {"keyed by group": sum(len(r) for r in per_rollout)}
    groups = {entry.rollout_id: entry.group_id for _, entry in queue}
    placed: dict[str, set[int]] = {}
    for read in read_log(kafka, replace(old.events, name=copy), LogRange()):
        assert isinstance(read, Delivered) and isinstance(read.record, Envelope)
        group = groups[read.record.rollout_id]
        assert read.key == group.encode()
        placed.setdefault(group, set()).add(read.partition)
    assert all(len(found) == 1 for found in placed.values())
    used = set().union(*placed.values())
    assert len(used) > old.events.partitions if partitions else used <= {0, 1, 2, 3}
    out = f"test.keying.train.{uuid.uuid4().hex[:8]}"
    run_replay(
        kafka, LogRange(), out, config, sources=replace(old, events=replace(old.events, name=copy))
    )
    assert train_samples(kafka, out) == reference
