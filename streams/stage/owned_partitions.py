"""The forge.events partitions this worker owns in the current generation, each taken over
once before its first record is processed: its transactional producer started (which fences
the previous owner and ends its open transaction, ``streams.stage.group_writes``), then the marks
of its settled groups read (``streams.stage.settled_groups``), then the offset its floor was
committed at and the event time committed with it (``streams.event_time.floor_event_time``): what a
new owner does not read again it cannot learn from the records, and a partition committed to its
end would leave it no event time to start the watermarks from. In that order nothing the
previous owner commits can be missed: after the fence it commits nothing more.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from streams.event_time.live_state import LiveState
from streams.event_time.watermarks import newest_of_metadata
from streams.pipeline_config import PipelineConfig
from streams.stage.dead_letters import DeadLetters
from streams.stage.events_partition import EventsPartition
from streams.stage.group_scorer import Settlement
from streams.stage.group_writes import GroupWrites, Topics, start_producer
from streams.stage.settled_groups import SettledGroups, read_marks
from streams.stalls import PARTITION_STAGE, Stalls, stage_name

log = logging.getLogger(__name__)

RETRY_S = 1.0
METADATA_TIMEOUT_S = 10.0
"""How long the broker may take to say what an events floor was committed with."""


@dataclass
class RejoinBackoff:
    """How long a partition's failed producer waits before asking for a new generation
    (pure): at once the first time, then twice as long each time no transaction of any
    partition has gone through since, up to ``max_s`` — a topic that refuses every batch
    would otherwise have the group rebalance without a pause."""

    first_s: float = 1.0
    max_s: float = 30.0
    _failures: int = 0

    def next_wait_s(self) -> float:
        waited = 0.0 if self._failures == 0 else self.first_s * 2 ** (self._failures - 1)
        self._failures += 1
        return min(self.max_s, waited)

    def committed(self) -> None:
        self._failures = 0


@dataclass(frozen=True)
class Takeover:
    """What taking a partition over needs."""

    bootstrap: str
    app_id: str
    consumer_group: str
    events_topic: str
    topics: Topics
    config: PipelineConfig
    expire_after: timedelta
    """How long a rollout not ended is held (``streams.stage.open_rollouts``)."""
    mark_keep: timedelta
    """How long a settled group's mark is kept (``streams.stage.settled_groups``)."""


class OwnedPartitions:
    def __init__(
        self,
        takeover: Takeover,
        letters: DeadLetters,
        before_commit: Callable[[], Awaitable[None]] | None,
        on_committed: Callable[[list[Settlement]], None],
        *,
        owns: Callable[[int], bool],
        rejoin: Callable[[], Awaitable[None]],
        stalls: Stalls | None = None,
    ) -> None:
        """``owns``: whether an events partition is in the consumer's assignment now;
        ``rejoin``: asks the group for a new generation; ``stalls``: told of each takeover's
        and each transaction's outcome, per partition."""
        self.takeover = takeover
        self.letters = letters
        self.before_commit = before_commit
        self.on_committed = on_committed
        self.owns = owns
        self.rejoin = rejoin
        self.stalls = stalls
        self._generation = -1
        self._revoked = -1
        """Generations up to this one are over: their partitions are being handed out."""
        self._writers: dict[int, GroupWrites] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._stopping: set[asyncio.Future[None]] = set()
        self._backoff = RejoinBackoff()

    def _current(self, state: LiveState) -> bool:
        return state.generation == self._generation and state.generation > self._revoked

    def _over(self, state: LiveState) -> bool:
        """``state``'s generation is older than the newest seen, or revoked."""
        return state.generation < self._generation or state.generation <= self._revoked

    def writers(self, state: LiveState | None) -> dict[int, GroupWrites]:
        """The partitions taken over in ``state``'s generation."""
        if state is None or not self._current(state):
            return {}
        return dict(self._writers)

    async def writer(self, state: LiveState, partition: int) -> GroupWrites | None:
        """The partition's writer, taken over first if it is not yet (the broker away: tried
        again until it answers); None for a generation gone, or a partition not owned. The
        generation only moves forward: a task still holding an older one finds nothing."""
        if self._over(state):
            return None
        if state.generation > self._generation:
            self._new_generation(state.generation)
        found = self._writers.get(partition)
        if found is not None:
            return found
        lock = self._locks.setdefault(partition, asyncio.Lock())
        async with lock:
            while self._current(state) and partition not in self._writers:
                if not self.owns(partition):
                    return None
                if self.stalls is not None:
                    self.stalls.attempting(stage_name(partition, "takeover"), time.monotonic())
                try:
                    await self._take_over(state, partition)
                except (KafkaError, TimeoutError) as error:
                    if self.stalls is not None:
                        stage = stage_name(partition, "takeover")
                        self.stalls.failed(stage, time.monotonic(), repr(error))
                    log.warning("taking over events partition %d failed (%r): again in %.0f s",
                                partition, error, RETRY_S)  # fmt: skip
                    await asyncio.sleep(RETRY_S)
        return self._writers.get(partition) if self._current(state) else None

    def revoke(self, generation: int) -> None:
        """A rebalance begins: the writers of ``generation`` stop, and nothing of it is taken
        over again (its partitions' next owners read again what they did not commit)."""
        self._revoked = max(self._revoked, generation)
        self._stop_writers()

    async def _failed(self, writer: GroupWrites) -> None:
        """A writer's producer was fenced or failed for good while this generation owns its
        partition (another worker's stale takeover fenced it, or aiokafka gave up): a new
        generation takes every partition over afresh. Never a new producer here: a zombie
        doing that would fence the partition's rightful owner."""
        if self._writers.get(writer.events.partition) is not writer:
            return
        wait_s = self._backoff.next_wait_s()
        log.warning("%s cannot commit: asking the group for a new generation in %.0f s",
                    writer.events, wait_s)  # fmt: skip
        await asyncio.sleep(wait_s)
        if self._writers.get(writer.events.partition) is writer:  # no rebalance meanwhile
            await self.rejoin()

    def _committed(self, settlements: list[Settlement]) -> None:
        self._backoff.committed()
        self.on_committed(settlements)

    async def _take_over(self, state: LiveState, partition: int) -> None:
        t = self.takeover
        producer = await start_producer(t.bootstrap, t.app_id, partition)
        try:
            settled = SettledGroups(t.mark_keep)
            marks_topic = t.topics.marks
            for record, reason in settled.load(
                await read_marks(t.bootstrap, marks_topic, partition)
            ):
                await self.letters.send_record(marks_topic, partition, record.offset, reason,
                                               record.key, record.value)  # fmt: skip
            events = TopicPartition(t.events_topic, partition)
            floor, newest = await committed_floor(t.bootstrap, t.consumer_group, events)
        except BaseException:
            await producer.stop()
            raise
        if not self._current(state):
            await producer.stop()
            return
        state.progress.seed(partition, floor, newest)
        work = EventsPartition(t.config, t.expire_after, settled, taken_over_at=floor)
        state.partitions[partition] = work
        self._writers[partition] = GroupWrites(
            producer, events, t.consumer_group, work, state.progress, t.topics,
            before_commit=self.before_commit, on_committed=self._committed,
            on_failed=self._failed, stalls=self.stalls,
        )  # fmt: skip
        if self.stalls is not None:
            self.stalls.succeeded(stage_name(partition, "takeover"))

    def _new_generation(self, generation: int) -> None:
        self._stop_writers()
        if self.stalls is not None:  # a partition handed to another worker is its to report
            self.stalls.keep_only(self._still_ours)
        self._generation = generation  # the locks stay: a takeover still on its way ends first

    def _still_ours(self, stage: str) -> bool:
        if not stage.startswith(PARTITION_STAGE):
            return True
        return self.owns(int(stage.removeprefix(PARTITION_STAGE).split()[0]))

    def _stop_writers(self) -> None:
        """What the last generation took over is stopped: its uncommitted outputs are read
        again by the next owner (this worker, maybe), whose producer fences these anyway."""
        for writer in self._writers.values():
            stopping = asyncio.ensure_future(writer.stop())
            self._stopping.add(stopping)
            stopping.add_done_callback(self._stopping.discard)
        self._writers = {}

    async def stop(self) -> None:
        self._stop_writers()
        await asyncio.gather(*self._stopping, return_exceptions=True)


async def committed_floor(
    bootstrap: str, group: str, partition: TopicPartition, timeout_s: float = METADATA_TIMEOUT_S
) -> tuple[int, datetime | None]:
    """The offset ``group`` committed for ``partition`` (0 for none) and the event time it
    was committed with; KafkaError or TimeoutError when the broker does not answer within
    ``timeout_s``. Asked rarely (once per partition and generation), so by a client of its own
    made for the question."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000)
    )
    try:
        async with asyncio.timeout(timeout_s):
            await admin.start()
            found = await admin.list_consumer_group_offsets(group, partitions=[partition])
    finally:
        await admin.close()
    committed = found.get(partition)
    if committed is None or committed.offset < 0:
        return 0, None
    return committed.offset, newest_of_metadata(committed.metadata or "")
