"""Keeps the engine on the newest policy: follows forge.policy from its beginning.

Catching up (a start or restart) only the newest policy is loaded, not every version the log
ever held: older checkpoints are pruned from disk by then, and each load of a real model costs
seconds (a reload of every vLLM server). An update is held while the log is known to hold
records after it, and loaded once it is the last one read — or after ``IDLE_S`` without a
record, in case those later records were undecodable (dead-lettered, never yielded).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiokafka import TopicPartition

from infra.kafka_clients import Delivered, async_consumer, consume_records, durable_producer
from schemas.records import PolicyUpdated
from schemas.topics import TopicSpec

log = logging.getLogger(__name__)
IDLE_S = 1.0


class NewestPolicy:
    """Which update to load: each newer one, but while behind the log only the newest."""

    def __init__(self) -> None:
        self.newest = -1
        self.held: PolicyUpdated | None = None

    def offer(self, update: PolicyUpdated, behind: bool) -> PolicyUpdated | None:
        """The update to load now, if any; ``behind``: the log holds records after it."""
        if update.version <= self.newest:
            return None if behind else self.idle()  # the last record read: nothing newer
        self.newest = update.version
        self.held = update if behind else None
        return None if behind else update

    def idle(self) -> PolicyUpdated | None:
        """Nothing more came: the held update, to load now."""
        held, self.held = self.held, None
        return held


async def follow_policy(
    bootstrap: str, topic: str, on_update: Callable[[PolicyUpdated], Awaitable[None]]
) -> None:
    """Call ``on_update`` for every PolicyUpdated newer than the last one applied (catching
    up, for the newest only)."""
    consumer = async_consumer(
        bootstrap, topic, auto_offset_reset="earliest", enable_auto_commit=False
    )
    dlq = durable_producer(bootstrap, client_id="forge-gateway-policy")
    await consumer.start()
    await dlq.start()
    choice = NewestPolicy()

    async def load(update: PolicyUpdated) -> None:
        try:
            await on_update(update)
        except Exception:
            log.exception("could not load policy v%d", update.version)

    records = consume_records(
        consumer, dlq, TopicSpec(topic, PolicyUpdated, 1), "gateway-policy-follower"
    )
    next_record: asyncio.Future[Delivered] | None = None
    try:
        while True:
            next_record = asyncio.ensure_future(anext(records))
            while not (await asyncio.wait({next_record}, timeout=IDLE_S))[0]:
                if (held := choice.idle()) is not None:
                    await load(held)
            delivered = next_record.result()
            assert isinstance(delivered.record, PolicyUpdated)
            end = consumer.highwater(TopicPartition(topic, delivered.partition))
            behind = end is not None and delivered.offset + 1 < end
            if (update := choice.offer(delivered.record, behind)) is not None:
                await load(update)
    finally:
        if next_record is not None and not next_record.done():
            next_record.cancel()
            await asyncio.gather(next_record, return_exceptions=True)
        await consumer.stop()
        await dlq.stop()
