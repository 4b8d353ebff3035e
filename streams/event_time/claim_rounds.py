"""The worker's task that sends the scored-through claims (``streams.event_time.scored_through``,
the sequencer's watermark) every ``group_check_s``: the I/O shell around the partitions' pure
``scored_through`` and ``idle``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime

import faust
from aiokafka.errors import KafkaError
from faust.exceptions import ProducerSendError

from infra.kafka_clients import EndOffsets, topic_partitions
from streams.event_time.live_state import Generations
from streams.event_time.scored_through import ScoredThrough
from streams.event_time.watermarks import SharedHorizon
from streams.faust_transport import consumer_generation

log = logging.getLogger(__name__)


def claim_scored_through(
    app: faust.App,
    generations: Generations,
    claims_topic: faust.types.TopicT,
    horizon: SharedHorizon,
    horizon_moved: asyncio.Event,
    *,
    bootstrap: str,
    trajectories_topic: str,
    partitions: int,
    group_check_s: float,
) -> None:
    """Adds the claims' task to ``app``; the claims name the ends of ``trajectories_topic``,
    ``partitions`` is forge.events' count."""
    trajectory_partitions = topic_partitions(bootstrap, (trajectories_topic,))

    async def send_claims(trajectory_ends: EndOffsets) -> None:
        """Each events partition this worker owns claims how far its trajectories are written,
        once it has processed what the horizon's marks of it count. The ends are asked after
        the claims are made: what each covers lies below them."""
        state = generations.current(consumer_generation(app))
        reached = horizon.horizon(partitions)
        if state is None or reached is None:
            return
        claims: dict[int, tuple[datetime, bool]] = {}
        for partition, work in list(state.partitions.items()):
            if horizon.counted(partition) > state.progress.counted(partition):
                continue
            idle = horizon.all_quiet(partitions) and work.groups.idle(reached)
            claims[partition] = work.groups.scored_through(reached), idle
        if not claims:
            return
        if not trajectory_partitions:  # metadata not there yet: claims naming none are void
            trajectory_partitions.extend(
                await asyncio.to_thread(topic_partitions, bootstrap, (trajectories_topic,))
            )
            return
        try:
            ends = await trajectory_ends.ends_of(trajectory_partitions)
        except (KafkaError, TimeoutError) as error:
            log.warning("scored-through claims skipped this round: %r", error)  # the broker away
            return
        by_partition = {tp.partition: offset for tp, offset in ends.items()}
        for partition, (through, idle) in claims.items():
            claim = ScoredThrough(partition, partitions, through, by_partition, idle)
            try:
                await claims_topic.send(
                    key=str(partition).encode(), value=claim.encode(), partition=partition
                )
            except (KafkaError, ProducerSendError) as error:
                log.warning("a scored-through claim skipped: %r", error)

    @app.task
    async def send_claims_regularly() -> None:
        """As soon as the horizon has read a round of watermarks (``horizon_moved``), and at
        least every ``group_check_s`` (groups committed move the claims too): a claim on a
        timer of its own waited up to a round for the round it could count."""
        ends = EndOffsets(bootstrap, timeout_s=5 * group_check_s)
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(horizon_moved.wait(), timeout=group_check_s)
                horizon_moved.clear()
                await send_claims(ends)
        finally:
            await ends.close()
