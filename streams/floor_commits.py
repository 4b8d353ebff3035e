"""Committing the input floors with metadata, and reading that metadata back.

A floor's commit is the only state that outlives a consumer-group generation
(``streams.live_state``), and what a new owner does not read again it cannot learn from the
records: a forge.events partition committed to its end leaves its next owner no event time to
start the watermarks from. So each events floor is committed with the newest event time of the
records below it (``streams.floor_event_time``), atomically with the offset, and the next owner
reads it before its first watermark or commit. Faust 0.15's commit always sends empty
metadata, so the commit here is its own, made on Faust's consumer thread as Faust's is.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import CommitFailedError, KafkaError
from aiokafka.structs import OffsetAndMetadata
from faust.types import TP

from streams.live_state import LiveState
from streams.watermarks import newest_metadata, newest_of_metadata

log = logging.getLogger(__name__)

METADATA_TIMEOUT_S = 10.0
"""How long the broker may take to say what the events floors were committed with."""


async def commit_with_metadata(consumer: Any, offsets: Mapping[TP, tuple[int, str]]) -> bool:
    """Commit ``offsets`` (partition: offset and metadata) of the partitions Faust's consumer
    still holds; False when the group has rebalanced meanwhile (the next generation reads again
    from what was committed before)."""
    thread = consumer._thread  # Faust 0.15: the thread that owns the aiokafka consumer

    async def commit() -> bool:
        held = {tp: value for tp, value in offsets.items() if tp in thread.assignment()}
        if not held:
            return False
        try:
            await thread._ensure_consumer().commit({
                TopicPartition(tp.topic, tp.partition): OffsetAndMetadata(offset, metadata)
                for tp, (offset, metadata) in held.items()
            })  # fmt: skip
        except CommitFailedError:
            return False
        thread.tp_last_committed_at.update(dict.fromkeys(held, time.monotonic()))  # as Faust's
        return True

    return bool(await thread.call_thread(commit))


async def committed_metadata(
    bootstrap: str, group: str, partitions: list[TopicPartition], timeout_s: float
) -> dict[TopicPartition, str]:
    """The metadata ``group`` committed with each of ``partitions`` ("" where none); KafkaError
    or TimeoutError when the broker does not answer within ``timeout_s``. Asked rarely (once per
    generation), so by a client of its own made for the question."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000)
    )
    try:
        async with asyncio.timeout(timeout_s):
            await admin.start()
            found = await admin.list_consumer_group_offsets(group, partitions=partitions)
    finally:
        await admin.close()
    return {tp: (found[tp].metadata or "") if tp in found else "" for tp in partitions}


class FloorCommits:
    """The worker's floors committed: each partition's (``streams.commit_floor``) that moved,
    an events partition's with the event time below it, after ``before_commit`` (the sink's
    flush, so a committed event's rows are stored unless the store is down)."""

    def __init__(
        self,
        app: Any,
        bootstrap: str,
        *,
        events_topic: str,
        scorer_topic: str,
        before_commit: Callable[[], object] | None,
    ) -> None:
        self.app = app  # its consumer is made later, read when committing
        self.bootstrap = bootstrap
        self.events_topic, self.scorer_topic = events_topic, scorer_topic
        self.before_commit = before_commit

    async def seed_progress(self, state: LiveState, partitions: set[int]) -> bool:
        """The newest event time each events partition's floor was committed with, merged in
        once per generation before its first watermark or commit; False while the broker does
        not say."""
        unseeded = state.progress.unseeded(partitions)
        if not unseeded:
            return True
        tps = [TopicPartition(self.events_topic, p) for p in sorted(unseeded)]
        try:
            found = await committed_metadata(
                self.bootstrap, self.app.conf.id, tps, METADATA_TIMEOUT_S
            )
        except (KafkaError, TimeoutError) as error:
            log.warning("the events floors' event times not read: %r", error)  # the broker away
            return False
        for tp, raw in found.items():
            state.progress.seed(tp.partition, newest_of_metadata(raw))
        return True

    async def commit(self, state: LiveState | None) -> None:
        if state is None:
            return
        floors = state.floors(self.events_topic, self.scorer_topic)
        events = {p for t, p in floors if t == self.events_topic}
        if events and not await self.seed_progress(state, events):
            floors = {(t, p): at for (t, p), at in floors.items() if t != self.events_topic}
        if not floors:
            return
        if self.before_commit is not None:
            self.before_commit()
        offsets = {
            TP(t, p): (
                at,
                newest_metadata(state.progress.below_floor(p, at)) if p in events else "",
            )
            for (t, p), at in floors.items()
        }
        if await commit_with_metadata(self.app.consumer, offsets):
            state.committed.update(floors)
