"""The buffer Faust's table writes go through: its flush waits for every message."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from faust.exceptions import ProducerSendError
from faust.transport.producer import ProducerBuffer

from streams.draining_producer import DrainingBuffer


class SlowChannel:
    """Hands each message to "the client" after ``delay_s``, as a full client buffer does."""

    def __init__(self, delay_s: float, fail_at: int | None = None) -> None:
        self.delay_s = delay_s
        self.fail_at = fail_at
        self.sent: list[int] = []

    async def publish_message(self, fut: Any, wait: bool = False) -> None:
        await asyncio.sleep(self.delay_s)
        if len(self.sent) == self.fail_at:
            raise ConnectionError("the client refused it")
        self.sent.append(fut.number)


def message(channel: SlowChannel, number: int) -> Any:
    return SimpleNamespace(message=SimpleNamespace(channel=channel), number=number)


async def started(buffer_class: type[ProducerBuffer]) -> ProducerBuffer:
    buffer = buffer_class()
    buffer.app = SimpleNamespace(conf=SimpleNamespace(producer_threaded=False))
    await buffer.start()
    return buffer


async def flushed_after_puts(buffer_class: type[ProducerBuffer], channel: SlowChannel) -> list[int]:
    buffer = await started(buffer_class)
    for number in range(3):
        buffer.put(message(channel, number))
    await asyncio.sleep(0)  # the sending task takes the first one in hand
    await buffer.flush()
    sent = list(channel.sent)
    await asyncio.sleep(0.5)  # the rest goes out before stopping: Faust's own stop raises else
    await buffer.stop()
    return sent


def test_flush_returns_only_once_every_message_is_handed_over() -> None:
    channel = SlowChannel(delay_s=0.15)
    assert asyncio.run(flushed_after_puts(DrainingBuffer, channel)) == [0, 1, 2]


def test_faust_s_own_flush_returns_with_messages_still_buffered() -> None:
    """The gap this buffer closes (if Faust fixes it, this fails and the class can go)."""
    channel = SlowChannel(delay_s=0.15)
    assert asyncio.run(flushed_after_puts(ProducerBuffer, channel)) != [0, 1, 2]


def test_stopping_hands_over_what_is_left_in_order() -> None:
    async def scenario() -> list[int]:
        channel = SlowChannel(delay_s=0.05)
        buffer = await started(DrainingBuffer)
        for number in range(4):
            buffer.put(message(channel, number))
        await asyncio.sleep(0)
        await buffer.stop()
        return channel.sent

    assert asyncio.run(scenario()) == [0, 1, 2, 3]


def test_a_message_that_cannot_be_handed_over_fails_the_flush() -> None:
    async def scenario() -> None:
        channel = SlowChannel(delay_s=0.01, fail_at=1)
        buffer = await started(DrainingBuffer)
        for number in range(3):
            buffer.put(message(channel, number))
        try:
            await asyncio.wait_for(buffer.flush(), 5)
        finally:
            await buffer.stop()

    with pytest.raises(ProducerSendError):
        asyncio.run(scenario())


def test_flush_waits_for_what_was_put_before_it_not_after() -> None:
    """Tables keep writing while Faust commits: a flush waiting for an empty buffer would
    hold the commit back for as long as the load lasts."""

    async def scenario() -> tuple[list[int], int]:
        channel = SlowChannel(delay_s=0.05)
        buffer = await started(DrainingBuffer)
        for number in range(2):
            buffer.put(message(channel, number))
        flush = asyncio.create_task(buffer.flush())
        number = 2
        while not flush.done():
            buffer.put(message(channel, number))
            number += 1
            await asyncio.sleep(0.01)
        await flush
        sent = list(channel.sent)
        await buffer.stop()
        return sent, number

    sent, put = asyncio.run(scenario())
    assert sent[:2] == [0, 1] and len(sent) < put
