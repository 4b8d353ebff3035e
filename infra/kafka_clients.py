"""Kafka clients configured for forge-rl's records: durable producers, large messages, the DLQ.

Both client libraries are supported on purpose: aiokafka inside asyncio services (gateway,
Faust), kafka-python for synchronous tools (admin, replay, tests).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import kafka
import kafka.errors
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka import errors as aiokafka_errors
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

from infra.partitioner import RememberingPartitioner
from infra.replication import Replication, TopicFound, shortfalls
from schemas import codec
from schemas.errors import BrokerUnavailableError, SchemaError
from schemas.records import DeadLetter, Record
from schemas.topics import DLQ, MAX_MESSAGE_BYTES, TopicSpec

log = logging.getLogger(__name__)

PRODUCER_DURABLE: dict[str, Any] = {
    "acks": "all",
    "enable_idempotence": True,
    "compression_type": "zstd",
    "max_request_size": MAX_MESSAGE_BYTES,
}
BROKEN_PRODUCER: tuple[type[Exception], ...] = (
    aiokafka_errors.OutOfOrderSequenceNumber,
    aiokafka_errors.UnknownProducerId,
    aiokafka_errors.InvalidProducerEpoch,
    aiokafka_errors.InvalidProducerIdMapping,
    aiokafka_errors.InvalidTxnState,
)
"""The broker refuses the producer's own state for good — after a broker restart its sequence
numbers can have a gap, or the broker has forgotten its id: retried, every send fails again.
Only a new producer, with a new producer id, gets through."""
BATCH_BYTES = 1 << 20
"""A producer's batch per partition (the live worker's, its sequencer's, the replay's): many
trajectories or samples (~17 KB each for 2k-token calls). At aiokafka's 16 KB
default each holds one, and a send to a partition whose batch is in flight waits for the
broker's acknowledgement (docs/decisions.md, Streams)."""
CONSUMER_LARGE: dict[str, Any] = {
    # Records of aborted transactions (a fenced sequencer's) are never anyone's input.
    "isolation_level": "read_committed",
    "fetch_max_bytes": 4 * MAX_MESSAGE_BYTES,
    "max_partition_fetch_bytes": MAX_MESSAGE_BYTES + 1024 * 1024,
}


def admin_client(bootstrap: str, timeout_s: float) -> KafkaAdminClient:
    """An admin client, or BrokerUnavailableError after at most ``timeout_s``."""
    try:
        return KafkaAdminClient(
            bootstrap_servers=bootstrap,
            request_timeout_ms=int(timeout_s * 1000),
            bootstrap_timeout_ms=int(timeout_s * 1000),
            client_id="forge-rl-admin",
        )
    except kafka.errors.KafkaError as exc:
        raise BrokerUnavailableError(
            bootstrap, f"no broker answered within {timeout_s:.0f}s"
        ) from exc


def ensure_topics(
    bootstrap: str,
    specs: tuple[TopicSpec, ...],
    timeout_s: float,
    replication: Replication | None = None,
) -> list[str]:
    """Create the topics that do not exist yet, replicated as ``replication`` says on this
    cluster (default: min(3, brokers) copies, one fewer in sync); return the names created.
    An existing topic that keeps fewer copies, or has other partitions, is a warning naming it
    and the remedy. Idempotent."""
    admin = admin_client(bootstrap, timeout_s)
    try:
        factor, min_insync = (replication or Replication()).resolved(_brokers(admin))
        existing = set(admin.list_topics())
        missing = [spec for spec in specs if spec.name not in existing]
        for spec in specs:
            if spec.name in existing:
                found = _topic_found(admin, spec.name)
                for warning in shortfalls(found, spec.partitions, factor, min_insync):
                    log.warning("%s", warning)
        if missing:
            request = {
                spec.name: {
                    "num_partitions": spec.partitions,
                    "replication_factor": factor,
                    "configs": {**spec.configs, "min.insync.replicas": str(min_insync)},
                }
                for spec in missing
            }
            try:
                admin.create_topics(
                    request, timeout_ms=int(timeout_s * 1000), wait_for_metadata=True
                )
            except kafka.errors.TopicAlreadyExistsError:
                log.info("topics were created concurrently; nothing to do")
        return [spec.name for spec in missing]
    finally:
        admin.close()


def cluster_replication(
    bootstrap: str, timeout_s: float, replication: Replication
) -> tuple[int, int]:
    """(factor, min in-sync) ``replication`` resolves to on the cluster at ``bootstrap``."""
    admin = admin_client(bootstrap, timeout_s)
    try:
        return replication.resolved(_brokers(admin))
    finally:
        admin.close()


def _brokers(admin: KafkaAdminClient) -> int:
    return len(admin.describe_cluster().get("brokers") or ())


def _topic_found(admin: KafkaAdminClient, name: str) -> TopicFound:
    [topic] = admin.describe_topics([name])
    partitions = topic.get("partitions") or []
    factor = min((len(p.get("replica_nodes") or ()) for p in partitions), default=0)
    resource = ConfigResource(ConfigResourceType.TOPIC, name, configs=["min.insync.replicas"])
    described = admin.describe_configs([resource], config_filter="all")
    entry = ((described.get("topic") or {}).get(name) or {}).get("min.insync.replicas") or {}
    return TopicFound(name, len(partitions), factor, int(entry.get("value") or 1))


def durable_producer(bootstrap: str, **overrides: Any) -> AIOKafkaProducer:
    """An asyncio producer whose acknowledged sends survive a broker restart."""
    settings = {**PRODUCER_DURABLE, "partitioner": RememberingPartitioner(), **overrides}
    return AIOKafkaProducer(bootstrap_servers=bootstrap, **settings)


def sync_producer(bootstrap: str, **overrides: Any) -> kafka.KafkaProducer:
    return kafka.KafkaProducer(bootstrap_servers=bootstrap, **{**PRODUCER_DURABLE, **overrides})


def sync_consumer(bootstrap: str, **overrides: Any) -> kafka.KafkaConsumer:
    return kafka.KafkaConsumer(bootstrap_servers=bootstrap, **{**CONSUMER_LARGE, **overrides})


def topic_partitions(bootstrap: str, topics: tuple[str, ...]) -> list[TopicPartition]:
    """Every partition of ``topics`` (aiokafka's metadata can lag behind new topics)."""
    probe = sync_consumer(bootstrap)
    try:
        return [
            TopicPartition(topic, p)
            for topic in topics
            for p in sorted(probe.partitions_for_topic(topic) or ())
        ]
    finally:
        probe.close()


def async_consumer(bootstrap: str, *topics: str, **overrides: Any) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(*topics, bootstrap_servers=bootstrap, **{**CONSUMER_LARGE, **overrides})


class EndOffsets:
    """The end offsets of any partitions, asked of the broker by an idle consumer of our own
    (inside Faust, its consumer's thread can take seconds to answer). Started at the first
    question and made again after a failure; each question is bounded by ``timeout_s``."""

    def __init__(self, bootstrap: str, timeout_s: float) -> None:
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self._consumer: AIOKafkaConsumer | None = None

    async def ends_of(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Raises KafkaError or TimeoutError when the broker does not answer in time."""
        try:
            async with asyncio.timeout(self.timeout_s):
                if self._consumer is None:
                    consumer = AIOKafkaConsumer(
                        bootstrap_servers=self.bootstrap, enable_auto_commit=False,
                        request_timeout_ms=int(self.timeout_s * 1000),
                    )  # fmt: skip
                    try:
                        await consumer.start()
                    except BaseException:
                        await consumer.stop()
                        raise
                    self._consumer = consumer
                return dict(await self._consumer.end_offsets(partitions))
        except (aiokafka_errors.KafkaError, TimeoutError):
            await self.close()
            raise

    async def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()


@dataclass(frozen=True)
class Delivered:
    """A decoded record with the position it was read from."""

    record: Record
    topic: str
    partition: int
    offset: int
    key: bytes | None


def decode_message(
    spec: TopicSpec,
    *,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    consumer: str,
) -> Delivered | DeadLetter:
    """Decode one message of ``spec``'s topic, or say why it cannot be (as a DeadLetter)."""
    if value is None:
        reason = "empty value (tombstone) on a topic that carries records"
    else:
        try:
            record = codec.decode(value, spec.record)
        except SchemaError as exc:
            reason = str(exc)
        else:
            return Delivered(record, spec.name, partition, offset, key)
    return DeadLetter(
        source_topic=spec.name,
        partition=partition,
        offset=offset,
        reason=reason,
        consumer=consumer,
        ts=datetime.now(UTC),
        key=key,
        value=value,
    )


async def consume_records(
    consumer: AIOKafkaConsumer,
    dlq_producer: AIOKafkaProducer,
    spec: TopicSpec,
    name: str,
) -> AsyncIterator[Delivered]:
    """Yield decoded records; anything undecodable goes to forge.dlq (acknowledged) first."""
    async for msg in consumer:
        result = decode_message(
            spec,
            partition=msg.partition,
            offset=msg.offset,
            key=msg.key,
            value=msg.value,
            consumer=name,
        )
        if isinstance(result, DeadLetter):
            log.warning(
                "dead-lettered %s[%d]@%d: %s",
                spec.name, msg.partition, msg.offset, result.reason,
            )  # fmt: skip
            await dlq_producer.send_and_wait(DLQ.name, codec.encode(result), key=msg.key)
            continue
        yield result
