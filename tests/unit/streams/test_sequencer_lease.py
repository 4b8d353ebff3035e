"""The sequencer's lease is the group's word: a fenced term does not give it up."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka.errors import ProducerFenced

from streams.config import StreamsSettings
from streams.pipeline_config import PipelineConfig
from streams.sequencing import live_sequencer


class ElectionHandingUsThePartition:
    """The election consumer: the group assigns this worker forge.queue's partition once."""

    def __init__(self, **_: Any) -> None:
        self.listener: Any = None
        self.assigned = False

    def subscribe(self, topics: list[str], listener: Any) -> None:
        self.listener = listener

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def pause(self, *_: Any) -> None: ...

    async def getmany(self, timeout_ms: int) -> dict[Any, Any]:
        if not self.assigned:
            self.assigned = True
            await self.listener.on_partitions_assigned({("forge.queue", 0)})
        await asyncio.sleep(timeout_ms / 1000 / 10)
        return {}


async def test_a_term_fenced_while_the_group_hands_us_the_lease_is_started_again(monkeypatch):
    """A resumed zombie: its old term is fenced, but the group has just handed it the
    partition again. Giving the lease up on the fence left nobody sequencing (a chaos run)."""
    terms: list[int] = []
    second_term = asyncio.Event()

    async def term(*_: Any) -> None:
        terms.append(len(terms))
        if len(terms) == 1:
            raise ProducerFenced()
        second_term.set()
        await asyncio.Event().wait()

    monkeypatch.setattr(live_sequencer, "AIOKafkaConsumer", ElectionHandingUsThePartition)
    monkeypatch.setattr(live_sequencer, "_sequence", term)
    settings = StreamsSettings(app_id="lease-test")
    task = asyncio.create_task(
        live_sequencer.run_sequencer(settings, "127.0.0.1:1", PipelineConfig(), None)
    )
    try:
        await asyncio.wait_for(second_term.wait(), timeout=10)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert terms == [0, 1]
