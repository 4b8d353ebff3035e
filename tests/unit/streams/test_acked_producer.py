"""The worker's producer flushes only once every buffered message is acknowledged: Faust
commits offsets right after this flush, so a changelog write still in hand would otherwise be
lost by a kill -9 that follows the commit."""

from __future__ import annotations

import asyncio
from typing import Any

import faust
import pytest
from aiokafka.errors import KafkaTimeoutError
from faust.exceptions import ProducerSendError
from faust.types import FutureMessage, PendingMessage

from streams.acked_producer import AckedFlushProducer, use_acked_flush


class SlowBroker:
    """A channel whose publish takes a while, as a loaded broker's acknowledgement does."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.published: list[bytes] = []

    async def publish_message(self, fut: FutureMessage, wait: bool = False) -> None:
        await asyncio.sleep(self.delay_s)
        self.published.append(fut.message.value)
        fut.set_result(None)  # type: ignore[arg-type]


def message(channel: Any, value: bytes) -> FutureMessage:
    return FutureMessage(PendingMessage(channel, b"k", value, 0, None, None, None, None, None))


async def test_flush_waits_for_the_message_in_hand_and_those_queued_behind_it():
    app = faust.App("acked-flush-test", broker="kafka://127.0.0.1:1")
    use_acked_flush(app)
    producer = app.producer
    assert isinstance(producer, AckedFlushProducer)
    broker = SlowBroker(delay_s=0.3)
    await producer.buffer.start()
    try:
        sent = [message(broker, b"in hand"), message(broker, b"queued")]
        for fut in sent:
            producer.send_soon(fut)
        await asyncio.sleep(0.05)  # the buffer has taken the first one in hand
        await producer.flush()
        assert all(fut.done() for fut in sent)
        assert broker.published == [b"in hand", b"queued"]
    finally:
        await producer.buffer.stop()


class FailingBroker(SlowBroker):
    async def publish_message(self, fut: FutureMessage, wait: bool = False) -> None:
        fut.set_exception(KafkaTimeoutError())


async def test_a_failed_write_fails_every_flush_after_it():
    app = faust.App("acked-flush-failure-test", broker="kafka://127.0.0.1:1")
    use_acked_flush(app)
    await app.producer.buffer.start()
    try:
        app.producer.send_soon(message(FailingBroker(0), b"lost"))
        for _ in range(2):  # no commit may pass it: the worker has to stop
            with pytest.raises(ProducerSendError, match="changelog write failed"):
                await app.producer.flush()
    finally:
        await app.producer.buffer.stop()
