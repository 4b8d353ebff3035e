"""Reading the gateway's state back from the log: open rollouts from forge.events, and the
trainer's queue head from forge.metrics (for admission).

At start-up the gateway reads forge.events from ``rollout_timeout_s`` (plus a margin) ago to
the end before it serves: a gateway restarted after kill -9 knows every rollout still open —
older ones have timed out anyway. With ``replicas > 1`` it goes on following the log, and the
consistency rule between replicas is read-your-writes per rollout through the log: before a
replica serves a request it has applied every event acknowledged before the request arrived
(it asks for the partitions' end offsets and waits until it has read that far).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from aiokafka import AIOKafkaConsumer, TopicPartition

from infra.kafka_clients import Delivered, async_consumer, decode_message, topic_partitions
from schemas.records import Envelope, TrainStep
from schemas.topics import TopicSpec

log = logging.getLogger(__name__)
Apply = Callable[[Envelope, str], None]
"""Folds in one event and its record's key (the rollout id where a producer gave none)."""


class EventFollower:
    def __init__(self, bootstrap: str, topic: str, apply: Apply, *, since_s: float) -> None:
        self.bootstrap, self.topic, self.apply, self.since_s = bootstrap, topic, apply, since_s
        self.consumer: AIOKafkaConsumer | None = None
        self._partitions: list[TopicPartition] = []
        self._read = asyncio.Condition()

    async def recover(self) -> int:
        """Read from ``since_s`` ago to the current end; returns the events applied."""
        self.consumer = async_consumer(self.bootstrap, enable_auto_commit=False)
        await self.consumer.start()
        self._partitions = await asyncio.to_thread(topic_partitions, self.bootstrap, (self.topic,))
        self.consumer.assign(self._partitions)
        since = datetime.now(UTC) - timedelta(seconds=self.since_s)
        starts = await self.consumer.offsets_for_times(
            {tp: int(since.timestamp() * 1000) for tp in self._partitions}
        )
        ends = await self.consumer.end_offsets(self._partitions)
        for tp in self._partitions:
            found = starts.get(tp)
            self.consumer.seek(tp, found.offset if found is not None else ends[tp])
        applied = 0
        while await self._behind(ends):
            applied += await self._poll(timeout_ms=200)
        return applied

    async def follow(self) -> None:
        """Keep applying what other replicas write."""
        while True:
            await self._poll(timeout_ms=100)

    async def sync(self) -> None:
        """Return once every event acknowledged before this call has been applied."""
        assert self.consumer is not None
        ends = await self.consumer.end_offsets(self._partitions)
        while await self._behind(ends):
            async with self._read:
                await self._read.wait()

    async def close(self) -> None:
        if self.consumer is not None:
            await self.consumer.stop()

    async def _poll(self, timeout_ms: int) -> int:
        assert self.consumer is not None
        batches = await self.consumer.getmany(timeout_ms=timeout_ms, max_records=2000)
        applied = 0
        spec = TopicSpec(self.topic, Envelope, len(self._partitions))
        for tp, messages in batches.items():
            for m in messages:
                decoded = decode_message(spec, partition=tp.partition, offset=m.offset,
                                         key=m.key, value=m.value, consumer="gateway")  # fmt: skip
                if isinstance(decoded, Delivered) and isinstance(decoded.record, Envelope):
                    record = decoded.record
                    key = record.rollout_id if m.key is None else m.key.decode(errors="replace")
                    self.apply(record, key)
                    applied += 1
        async with self._read:
            self._read.notify_all()
        return applied

    async def _behind(self, ends: dict[TopicPartition, int]) -> bool:
        assert self.consumer is not None
        for tp, end in ends.items():
            if await self.consumer.position(tp) < end:
                return True
        return False


async def follow_train_steps(
    bootstrap: str, topic: str, on_step: Callable[[TrainStep], None]
) -> None:
    """Hand over each TrainStep on ``topic`` (forge.metrics), from the first: its queue head
    frees admission room, its samples per domain steer the mix."""
    consumer = async_consumer(
        bootstrap, topic, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    spec = TopicSpec(topic, TrainStep, 1)
    try:
        async for m in consumer:
            decoded = decode_message(spec, partition=m.partition, offset=m.offset, key=m.key,
                                     value=m.value, consumer="gateway")  # fmt: skip
            if isinstance(decoded, Delivered) and isinstance(decoded.record, TrainStep):
                on_step(decoded.record)
    finally:
        await consumer.stop()
