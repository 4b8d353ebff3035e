"""The event contract end to end through the real broker."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from infra.kafka_clients import (
    async_consumer,
    consume_records,
    durable_producer,
    sync_consumer,
    sync_producer,
)
from infra.log_reader import LogRange, read_log
from schemas import codec
from schemas.records import DeadLetter, Envelope, ProcessSignal
from schemas.topics import DLQ, EVENTS
from tests.builders import T0, envelope, model_request, model_response

pytestmark = pytest.mark.integration


def read_all_sync(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = sync_consumer(
        bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=20_000,
    )
    consumer.subscribe([topic])
    values = []
    for msg in consumer:
        values.append(msg.value)
        if len(values) == count:
            break
    consumer.close()
    return values


async def read_all_async(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = async_consumer(bootstrap, topic, auto_offset_reset="earliest")
    await consumer.start()
    try:
        values = []
        async with asyncio.timeout(30):
            async for msg in consumer:
                values.append(msg.value)
                if len(values) == count:
                    break
        return values
    finally:
        await consumer.stop()


async def test_200k_token_request_kafka_python_to_aiokafka(kafka, fresh_topic):
    topic = fresh_topic(EVENTS)
    sent = envelope(model_request(prompt_tokens=200_000))
    producer = sync_producer(kafka)
    producer.send(topic.name, codec.encode(sent), key=b"rollout-1").get(timeout=30)
    producer.close()
    (value,) = await read_all_async(kafka, topic.name, 1)
    assert codec.decode(value, Envelope) == sent


async def test_32k_token_response_aiokafka_to_kafka_python(kafka, fresh_topic):
    topic = fresh_topic(EVENTS)
    sent = envelope(model_response(completion_tokens=32_000))
    producer = durable_producer(kafka)
    await producer.start()
    try:
        await producer.send_and_wait(topic.name, codec.encode(sent), key=b"rollout-1")
    finally:
        await producer.stop()
    (value,) = read_all_sync(kafka, topic.name, 1)
    assert codec.decode(value, Envelope) == sent


def test_replay_by_timestamp_returns_exactly_events_at_or_after_t(kafka, fresh_topic):
    topic = fresh_topic(EVENTS)
    producer = sync_producer(kafka)
    sent = []
    for i in range(20):
        ts = T0 + timedelta(seconds=i)
        event = envelope(ProcessSignal(step=i, name="s", value=float(i)), f"r{i % 3}", ts)
        sent.append(event)
        producer.send(
            topic.name,
            codec.encode(event),
            key=event.rollout_id.encode(),
            timestamp_ms=int(ts.timestamp() * 1000),
        )
    producer.flush()
    producer.close()
    t = int((T0 + timedelta(seconds=12)).timestamp() * 1000)
    got = [d.record for d in read_log(kafka, topic, LogRange(from_ts_ms=t))]
    expected = [e for e in sent if e.ts >= T0 + timedelta(seconds=12)]
    assert sorted(got, key=lambda e: e.ts) == expected
    until = int((T0 + timedelta(seconds=15)).timestamp() * 1000)
    bounded = [d.record for d in read_log(kafka, topic, LogRange(from_ts_ms=t, to_ts_ms=until))]
    assert sorted(e.payload.step for e in bounded) == [12, 13, 14]


async def test_undecodable_message_lands_in_dlq_with_reason(kafka, fresh_topic):
    topic = fresh_topic(EVENTS)
    good = envelope(model_request())
    producer = durable_producer(kafka)
    await producer.start()
    try:
        await producer.send_and_wait(topic.name, b"not avro at all", key=b"rollout-1")
        await producer.send_and_wait(topic.name, codec.encode(good), key=b"rollout-1")
        consumer = async_consumer(kafka, topic.name, auto_offset_reset="earliest")
        await consumer.start()
        try:
            async with asyncio.timeout(30):
                stream = consume_records(consumer, producer, topic, "test-consumer")
                delivered = await anext(stream)
        finally:
            await consumer.stop()
    finally:
        await producer.stop()
    assert delivered.record == good
    assert delivered.offset == 1
    letters = [d.record for d in read_log(kafka, DLQ, LogRange())]
    mine = [d for d in letters if isinstance(d, DeadLetter) and d.source_topic == topic.name]
    assert len(mine) == 1
    assert mine[0].value == b"not avro at all"
    assert mine[0].offset == 0
    assert "bad magic" in mine[0].reason
