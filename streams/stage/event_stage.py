"""The stage's Faust shell (I/O: Faust, Kafka): forge.events read a fetched batch of one
partition at a time, each record decoded once and added to its partition's open rollouts and
groups (``streams.stage.events_partition``); settled groups handed to the partition's writer
(``streams.stage.group_writes``), rollouts that cannot be scored to forge.dlq; every
``group_check_s`` the groups past their timeout at the shared horizon settled, and every
second the floors that moved with no group settled committed.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import faust

from schemas.records import Envelope
from streams.analytics.sinks import SinkBuffer, call_rows
from streams.event_time.live_state import Generations, LiveState
from streams.event_time.watermarks import SharedHorizon
from streams.faust_transport import consumer_generation, current_records
from streams.stage.dead_letters import DeadLetters
from streams.stage.events_partition import Outputs, misplaced
from streams.stage.group_writes import GroupWrites
from streams.stage.owned_partitions import OwnedPartitions

log = logging.getLogger(__name__)

COMMIT_INTERVAL_S = 1.0


@dataclass
class EventStage:
    """What the stage's agent and timers share."""

    app: faust.App
    events_topic: str
    partitions: int
    """Of forge.events: a group's partition is its key's hash modulo this."""
    generations: Generations
    horizon: SharedHorizon
    owned: OwnedPartitions
    letters: DeadLetters
    buffer: SinkBuffer | None
    max_unwritten_rollouts: int
    """Reading a partition waits while more than this wait for its transaction."""

    def _state(self) -> LiveState | None:
        return self.generations.current(consumer_generation(self.app))

    async def send_outputs(self, writer: GroupWrites, out: Outputs, partition: int) -> None:
        """A rollout that cannot be scored to forge.dlq (the floor passes it once the letter is
        acknowledged); settled groups to their transaction, their calls rows to the analytics
        (rollout rows come from the sequencer)."""
        for dead in out.dead:
            await self.letters.send_record(
                self.events_topic, partition, dead.offset, dead.reason, dead.key, dead.value
            )
            if dead.release is not None:
                writer.partition.release(dead.release)
        if self.buffer is not None and out.settlements:
            self.buffer.add(calls=call_rows(
                e for s in out.settlements for m in s.present for e in m.events.events
            ))  # fmt: skip
        writer.add(out.settlements)

    async def process_batch(self, state: LiveState, writer: GroupWrites, batch: list[Any]) -> None:
        work, progress = writer.partition, state.progress
        out = Outputs()
        for message in batch:
            if message.offset < work.taken_over_at:
                continue  # committed by the previous owner after the consumer was positioned
            envelope = await self.letters.decoded(message, Envelope)
            if envelope is None:
                work.passed(message.offset)
            elif (reason := misplaced(envelope, message.partition, self.partitions)) is not None:
                log.error("%s", reason)
                await self.letters.send_message(message, reason)
                work.passed(message.offset)
            else:
                got = work.add(message.offset, envelope)
                out.settlements += got.settlements
                out.dead += got.dead
            progress.processed(message.partition, message.offset,
                               None if envelope is None else envelope.ts,
                               time.monotonic())  # fmt: skip
        await self.send_outputs(writer, out, batch[-1].partition)

    async def process_stream(self, stream: faust.StreamT) -> None:
        """Each Faust event is a batch of one partition's records (``faust_transport``)."""
        async for event in stream.events():
            state = self.generations.state_in(event.message.generation_id)
            if state is None:
                continue  # read in a generation gone: it is read again from the floor
            batch = list(current_records(self.app, event))
            if not batch:
                continue
            writer = await self.owned.writer(state, event.message.partition)
            if writer is not None:
                await self.process_batch(state, writer, batch)
                await writer.wait_unwritten_below(self.max_unwritten_rollouts)

    async def settle_timed_out(self) -> None:
        """Open groups past their timeout at the horizon settle, on the partitions whose every
        record the horizon's marks count is processed here; marks past keeping are forgotten."""
        state = self._state()
        reached = self.horizon.horizon(self.partitions)
        if state is None or reached is None:
            return
        for partition, writer in self.owned.writers(state).items():
            if self.horizon.counted(partition) > state.progress.counted(partition):
                continue  # a previous owner's marks count records not read again yet
            out = writer.partition.check_timeouts(reached)
            await self.send_outputs(writer, out, partition)
            writer.forget(writer.partition.settled.prune(reached))

    def commit_moved_floors(self) -> None:
        """Floors that moved with no group settled (dead letters, let-go rollouts)."""
        for writer in self.owned.writers(self._state()).values():
            writer.request()


def add_event_stage(stage: EventStage, events: faust.TopicT, *, group_check_s: float) -> None:
    """The stage's agent over ``events`` and its timers, added to ``stage.app``; its writers
    stop when the partitions are revoked and when the worker shuts down."""
    app = stage.app

    @app.agent(events)
    async def process_events(stream: faust.StreamT) -> None:
        await stage.process_stream(stream)

    @app.timer(interval=group_check_s)
    async def check_timeouts() -> None:
        await stage.settle_timed_out()

    @app.timer(interval=COMMIT_INTERVAL_S)
    async def commit_regularly() -> None:
        stage.commit_moved_floors()

    @app.on_partitions_revoked.connect  # type: ignore[arg-type]
    async def stop_writers_on_revoke(sender: Any, revoked: set[Any], **kwargs: Any) -> None:
        stage.owned.revoke(consumer_generation(app))

    @app.on_before_shutdown.connect  # type: ignore[arg-type]
    async def stop_writers(sender: Any, **kwargs: Any) -> None:
        await stage.owned.stop()
