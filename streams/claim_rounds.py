"""The worker's task that sends the scored-through claims (``streams.scored_through``, the
sequencer's watermark) every ``group_check_s``: the I/O shell around the scorers' pure
``scored_through`` and ``idle``."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

import faust
from aiokafka.errors import KafkaError
from faust.exceptions import ProducerSendError

from infra.kafka_clients import EndOffsets, topic_partitions
from streams.faust_transport import consumer_generation
from streams.live_state import Generations
from streams.scored_through import ScoredThrough

log = logging.getLogger(__name__)


def claim_scored_through(
    app: faust.App,
    generations: Generations,
    claims_topic: faust.types.TopicT,
    *,
    bootstrap: str,
    trajectories_topic: str,
    partitions: int,
    group_check_s: float,
) -> None:
    """Adds the claims' task to ``app``; the claims name the ends of ``trajectories_topic``,
    ``partitions`` is the scorer topic's count."""
    trajectory_partitions = topic_partitions(bootstrap, (trajectories_topic,))

    async def send_claims(trajectory_ends: EndOffsets) -> None:
        """Each scorer partition this worker owns claims how far its trajectories are written.
        The ends are asked after the claims are made: what each covers lies below them."""
        state = generations.current(consumer_generation(app))
        claims: dict[int, tuple[datetime, bool, datetime | None]] = {}
        for partition, scorer in list(state.scorers.items() if state else ()):
            horizon = scorer.horizon.horizon(partitions)
            if horizon is not None:
                idle = scorer.horizon.still(partitions) and scorer.groups.idle(horizon)
                through = scorer.groups.scored_through(horizon)
                claims[partition] = through, idle, scorer.horizon.newest
        if not claims:
            return
        if not trajectory_partitions:  # metadata not there yet: claims naming none are void
            trajectory_partitions.extend(
                await asyncio.to_thread(topic_partitions, bootstrap, (trajectories_topic,))
            )
            return
        try:
            ends = await trajectory_ends.of(trajectory_partitions)
        except (KafkaError, TimeoutError) as error:
            log.warning("scored-through claims skipped this round: %r", error)  # the broker away
            return
        by_partition = {tp.partition: offset for tp, offset in ends.items()}
        for partition, (through, idle, newest) in claims.items():
            claim = ScoredThrough(partition, partitions, through, by_partition, idle, newest)
            try:
                await claims_topic.send(
                    key=str(partition).encode(), value=claim.encode(), partition=partition
                )
            except (KafkaError, ProducerSendError) as error:
                log.warning("a scored-through claim skipped: %r", error)

    @app.task
    async def send_claims_regularly() -> None:
        """Every ``group_check_s``, half a round after the watermarks (time for the scorers to
        read a round): a claim made as a round is sent counts the round before, and its
        samples wait a round longer. Each timer keeps its own pace: a slow round of one does
        not hold the other."""
        ends = EndOffsets(bootstrap, timeout_s=5 * group_check_s)
        try:
            await app.sleep(group_check_s / 2)
            async for _ in app.itertimer(group_check_s, name="claims"):
                await send_claims(ends)
        finally:
            await ends.close()
