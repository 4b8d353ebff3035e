"""After a rebalance every forge.events partition is read again from its committed floor, through
the real broker: aiokafka's own ``seek_to_committed`` leaves a partition with 0 or nothing
committed where its fetch stands (the records a stream dropped in the rebalance stay unread)."""

from __future__ import annotations

import uuid

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from infra.kafka_clients import async_consumer, sync_producer
from schemas.topics import EVENTS
from streams.faust_transport import seek_to_committed_or_beginning

pytestmark = pytest.mark.integration


async def fetched_to_the_end(consumer: AIOKafkaConsumer, partitions: list[TopicPartition]):
    """Reads every partition to its end, as a fetch in a rebalance does."""
    ends = await consumer.end_offsets(partitions)
    while [await consumer.position(tp) for tp in partitions] != [ends[tp] for tp in partitions]:
        await consumer.getmany(timeout_ms=500)
    return ends


async def test_each_partition_goes_back_to_its_committed_offset_or_its_first_record(
    kafka, fresh_topic
):
    topic = fresh_topic(EVENTS).name
    producer = sync_producer(kafka)
    for partition in range(3):
        for i in range(5):
            producer.send(topic, f"{partition}-{i}".encode(), partition=partition)
    producer.flush()
    producer.close()
    none, zero, two = (TopicPartition(topic, p) for p in range(3))
    consumer = async_consumer(kafka, group_id=f"test-seek-{uuid.uuid4().hex[:8]}",
                              enable_auto_commit=False, auto_offset_reset="earliest")  # fmt: skip
    await consumer.start()
    try:
        consumer.assign([none, zero, two])
        await consumer.commit({zero: OffsetAndMetadata(0, ""), two: OffsetAndMetadata(2, "")})
        ends = await fetched_to_the_end(consumer, [none, zero, two])
        assert ends == {none: 5, zero: 5, two: 5}

        await consumer.seek_to_committed()  # aiokafka's: only the offset above 0 moves
        assert [await consumer.position(tp) for tp in (none, zero, two)] == [5, 5, 2]

        await fetched_to_the_end(consumer, [none, zero, two])
        committed = await seek_to_committed_or_beginning(consumer)
        assert committed == {none: None, zero: 0, two: 2}
        assert [await consumer.position(tp) for tp in (none, zero, two)] == [0, 0, 2]
        first = await consumer.getmany(none, zero, timeout_ms=5000)
        assert {tp: records[0].offset for tp, records in first.items()} == {none: 0, zero: 0}
    finally:
        await consumer.stop()
