"""Keeps the engine on the newest policy: follows forge.policy from its beginning."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from infra.kafka_clients import async_consumer, consume_records, durable_producer
from schemas.records import PolicyUpdated
from schemas.topics import TopicSpec

log = logging.getLogger(__name__)


async def follow_policy(
    bootstrap: str, topic: str, on_update: Callable[[PolicyUpdated], Awaitable[None]]
) -> None:
    """Call ``on_update`` for every PolicyUpdated newer than the last one applied."""
    consumer = async_consumer(
        bootstrap, topic, auto_offset_reset="earliest", enable_auto_commit=False
    )
    dlq = durable_producer(bootstrap, client_id="forge-gateway-policy")
    await consumer.start()
    await dlq.start()
    newest = -1
    try:
        async for delivered in consume_records(
            consumer, dlq, TopicSpec(topic, PolicyUpdated, 1), "gateway-policy-follower"
        ):
            update = delivered.record
            assert isinstance(update, PolicyUpdated)
            if update.version <= newest:
                continue
            newest = update.version
            try:
                await on_update(update)
            except Exception:
                log.exception("could not load policy v%d", update.version)
    except asyncio.CancelledError:
        raise
    finally:
        await consumer.stop()
        await dlq.stop()
