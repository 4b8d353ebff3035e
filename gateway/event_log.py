"""Appending the gateway's events to Kafka: durable (acks=all, idempotent) before any reply."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from datetime import UTC, datetime

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from gateway.errors import EventLogUnavailableError
from infra.kafka_clients import durable_producer
from schemas import codec
from schemas.records import Envelope, Event, QueueEntry

log = logging.getLogger(__name__)


class EventLog:
    def __init__(
        self, bootstrap: str, events_topic: str, queue_topic: str, *, timeout_s: float
    ) -> None:
        self.events_topic = events_topic
        self.queue_topic = queue_topic
        self.timeout_s = timeout_s
        self.bootstrap = bootstrap
        self.last_produce_s = 0.0

    async def start(self) -> None:
        """Connect; aiokafka binds its producer to the running event loop, so it is made here."""
        self.producer: AIOKafkaProducer = durable_producer(
            self.bootstrap,
            linger_ms=0,
            request_timeout_ms=int(self.timeout_s * 1000),
            client_id="forge-gateway",
        )
        try:
            await asyncio.wait_for(self.producer.start(), self.timeout_s)
        except (KafkaError, OSError, TimeoutError) as exc:
            await self.producer.stop()
            raise EventLogUnavailableError(f"Kafka unreachable at start-up: {exc!r}") from exc

    async def close(self) -> None:
        """Bounded: with Kafka gone, aiokafka keeps retrying sends whose callers were already
        answered 503 (nothing acknowledged is pending), and shutdown would wait on them."""
        try:
            await asyncio.wait_for(self.producer.stop(), self.timeout_s)
        except TimeoutError:
            log.warning("Kafka unreachable at shutdown: unacknowledged sends dropped")

    async def enqueue(self, entry: QueueEntry) -> int:
        """Store a generation-queue entry; its offset is the rollout's queue index."""
        try:
            future = await self.producer.send(
                self.queue_topic, codec.encode(entry), key=entry.rollout_id.encode()
            )
            metadata = await asyncio.wait_for(future, self.timeout_s)
        except (KafkaError, TimeoutError, OSError) as exc:
            raise EventLogUnavailableError(f"queue entry could not be stored: {exc!r}") from exc
        return int(metadata.offset)

    async def append(self, rollout_id: str, payloads: list[Event]) -> None:
        """Store events or raise; returns only once all are acknowledged."""
        now = datetime.now(UTC)
        key = rollout_id.encode()
        started = time.perf_counter()
        try:
            futures = [
                await self.producer.send(
                    self.events_topic,
                    codec.encode(
                        Envelope(
                            event_id=str(uuid.uuid4()),
                            rollout_id=rollout_id,
                            ts=now,
                            producer="gateway",
                            payload=payload,
                        )
                    ),
                    key=key,
                )
                for payload in payloads
            ]
            await asyncio.wait_for(asyncio.gather(*futures), self.timeout_s)
        except (KafkaError, TimeoutError, OSError) as exc:
            raise EventLogUnavailableError(
                f"events for rollout {rollout_id} could not be stored: {exc!r}"
            ) from exc
        finally:
            self.last_produce_s = time.perf_counter() - started
