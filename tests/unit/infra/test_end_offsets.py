"""EndOffsets: a broker that is not there is an error within the bound, and the next question
starts afresh (no consumer is kept half started)."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from infra.kafka_clients import EndOffsets
from infra.local_broker import free_port


def test_no_broker_is_an_error_within_the_bound_and_nothing_is_kept():
    async def ask_twice() -> EndOffsets:
        ends = EndOffsets(f"127.0.0.1:{free_port()}", timeout_s=2.0)
        for _ in range(2):
            started = time.monotonic()
            with pytest.raises((KafkaError, TimeoutError)):
                await ends.ends_of([TopicPartition("t", 0)])
            assert time.monotonic() - started < 2.5
        return ends

    ends = asyncio.run(ask_twice())
    assert ends._consumer is None
