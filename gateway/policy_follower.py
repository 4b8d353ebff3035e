"""Keeps the engine on the newest policy: follows forge.policy from its beginning."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiokafka import AIOKafkaConsumer

from schemas import codec
from schemas.errors import SchemaError
from schemas.records import PolicyUpdated

log = logging.getLogger(__name__)


async def follow_policy(
    bootstrap: str, topic: str, on_update: Callable[[PolicyUpdated], Awaitable[None]]
) -> None:
    """Call ``on_update`` for every PolicyUpdated newer than the last one applied."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    newest = -1
    try:
        async for msg in consumer:
            try:
                update = codec.decode(msg.value, PolicyUpdated)
            except SchemaError as exc:
                log.warning("ignoring undecodable record on %s@%d: %s", topic, msg.offset, exc)
                continue
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
