"""The live worker's one way to forge.dlq: every letter acknowledged before the agent moves on,
so nothing is dropped silently; undecodable records and tombstones take the same rule as
everywhere else (``infra.kafka_clients.decode_message``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, TypeVar

import faust

from infra.kafka_clients import decode_message
from schemas import codec
from schemas.records import DeadLetter, Record
from schemas.topics import TopicSpec

R = TypeVar("R", bound=Record)


class DeadLetters:
    def __init__(self, dlq: faust.TopicT, consumer: str) -> None:
        self.dlq = dlq
        self.consumer = consumer

    async def send(self, letter: DeadLetter) -> None:
        await (await self.dlq.send(key=letter.key, value=codec.encode(letter)))

    async def send_record(
        self,
        topic: str,
        partition: int,
        offset: int,
        reason: str,
        key: bytes | None,
        value: bytes | None,
    ) -> None:
        await self.send(DeadLetter(
            source_topic=topic, partition=partition, offset=offset, reason=reason,
            consumer=self.consumer, ts=datetime.now(UTC), key=key, value=value,
        ))  # fmt: skip

    async def send_message(self, message: Any, reason: str) -> None:
        """The message read, with the reason."""
        await self.send_record(message.topic, message.partition, message.offset, reason,
                               message.key, message.value)  # fmt: skip

    async def decoded(self, message: Any, record_type: type[R]) -> R | None:
        """The record a message (Faust's, or aiokafka's from a batch) holds, or None once it
        is in forge.dlq with the reason."""
        result = decode_message(
            TopicSpec(message.topic, record_type, 1), partition=message.partition,
            offset=message.offset, key=message.key, value=message.value, consumer=self.consumer,
        )  # fmt: skip
        if isinstance(result, DeadLetter):
            await self.send(result)
            return None
        assert isinstance(result.record, record_type)
        return result.record
