"""The live sequencer alone on the real broker: it applies nothing its scorer partitions have
not claimed written, however long the inputs are quiet.

Workers still rebalancing at start claim nothing for a while, yet the groups that completed
without a timeout are scored at once. A sequencer that read "no claim yet" as "no claims to
wait for" applied the end of its log whole once its inputs were quiet: a group that times out,
scored later, was trained after groups completed after it (a fresh-clone CI failure of the
kill -9 test), or its samples were dropped by the item timeout.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from kafka import TopicPartition

from infra.kafka_clients import ensure_topics, sync_consumer, sync_producer
from schemas import codec
from schemas.records import TrainSample
from schemas.topics import POLICY, QUEUE, TRAJECTORIES, TopicSpec, derived_train_topic
from streams.config import StreamsSettings
from streams.event_time.scored_through import ScoredThrough, scored_through_topic
from streams.internal_topics import internal_topics
from streams.pipeline_config import PipelineConfig
from streams.replay.pipeline import process_log
from streams.sequencing.live_sequencer import run_sequencer
from tests.builders import T0
from tests.integration.test_sequencer_exact import log_part
from tests.integration.test_streams_worker import train_samples

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SCORER_PARTITIONS = 2


def topics(kafka: str) -> StreamsSettings:
    suffix = uuid.uuid4().hex[:8]
    settings = StreamsSettings(
        app_id=f"test-claims-{suffix}",
        queue_topic=f"test.{QUEUE.name}.{suffix}",
        trajectories_topic=f"test.{TRAJECTORIES.name}.{suffix}",
        policy_topic=f"test.{POLICY.name}.{suffix}",
        train_topic=f"test.forge.train.{suffix}",
        idle_flush_s=0.2,
        group_check_s=0.2,
        lateness_s=0.0,
    )
    sources = (
        (QUEUE, settings.queue_topic),
        (TRAJECTORIES, settings.trajectories_topic),
        (POLICY, settings.policy_topic),
    )
    specs = [TopicSpec(name, s.record, s.partitions, s.configs) for s, name in sources]
    claims = internal_topics(settings.app_id, SCORER_PARTITIONS)
    ensure_topics(kafka, (*specs, *claims, derived_train_topic(settings.train_topic)), timeout_s=30)
    return settings


def send(kafka: str, topic: str, records: list[tuple[bytes, bytes]], partition=None) -> None:
    producer = sync_producer(kafka)
    for key, value in records:
        producer.send(topic, value, key=key, partition=partition)
    producer.flush()
    producer.close()


def trajectory_ends(kafka: str, topic: str) -> dict[int, int]:
    consumer = sync_consumer(kafka)
    try:
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        return {tp.partition: offset for tp, offset in consumer.end_offsets(parts).items()}
    finally:
        consumer.close()


async def test_nothing_is_applied_before_every_scorer_partition_claims_then_in_replay_order(
    kafka,
):
    settings = topics(kafka)
    config = PipelineConfig(item_timeout_s=30.0, group_timeout_s=6.0)
    events, queue = log_part(0, 24, 0.0, unfinished=frozenset({3}))  # g0 times out
    expected: list[TrainSample] = process_log(
        [e for r in events for e in r], queue, [], config
    ).samples
    timed_out = [s for s in expected if s.trajectory.group_id == "g0"]
    on_time = [s for s in expected if s.trajectory.group_id != "g0"]
    assert timed_out and on_time
    send(kafka, settings.queue_topic, [(e.rollout_id.encode(), codec.encode(e)) for _, e in queue])
    trajectory = settings.trajectories_topic
    send(kafka, trajectory, [(b"g", codec.encode(s.trajectory)) for s in on_time])
    task = asyncio.create_task(run_sequencer(settings, kafka, config, sink=None))
    try:
        quiet_for = 4 * settings.sequencer_flush_s  # the lease, a term, then a long quiet
        await asyncio.sleep(quiet_for + 5)
        assert not task.done(), task
        assert await asyncio.to_thread(train_samples, kafka, settings.train_topic) == []

        await asyncio.to_thread(
            send, kafka, trajectory, [(b"g0", codec.encode(s.trajectory)) for s in timed_out]
        )
        ends = await asyncio.to_thread(trajectory_ends, kafka, trajectory)
        after_everything = T0.replace(year=T0.year + 1)
        for partition in range(SCORER_PARTITIONS):
            claim = ScoredThrough(partition, SCORER_PARTITIONS, after_everything, ends)
            await asyncio.to_thread(
                send, kafka, scored_through_topic(settings.app_id),
                [(str(partition).encode(), claim.encode())], partition,
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while len(await asyncio.to_thread(train_samples, kafka, settings.train_topic)) < len(
            expected
        ):
            assert time.monotonic() < deadline, "the claims applied nothing"
            await asyncio.sleep(0.5)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert await asyncio.to_thread(train_samples, kafka, settings.train_topic) == expected
