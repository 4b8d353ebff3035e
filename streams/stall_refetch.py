"""The worker's timer that hands a stalled partition back to Faust's fetcher: the I/O shell of
``streams.stall_watch`` (which decides, purely, when an owned partition with records to read
has gone unfetched too long)."""

from __future__ import annotations

import logging
import time
from typing import Any, cast

import faust
from aiokafka.errors import KafkaError
from faust.exceptions import ConsumerNotStarted
from faust.types import TP

from streams.event_time.live_state import Generations
from streams.faust_transport import consumer_generation
from streams.stall_watch import StallWatch

log = logging.getLogger(__name__)

STALL_PATIENCE_S = 30.0
"""How long an owned partition may go unfetched with records to read."""


def refetch_stalled_partitions(app: faust.App, generations: Generations, events_topic: str) -> None:
    """Adds to ``app`` a timer that names each stalled partition of forge.events in the log and
    fetches it again."""
    stalls: StallWatch[TP] = StallWatch(STALL_PATIENCE_S)

    @app.timer(interval=STALL_PATIENCE_S / 3)
    async def refetch_stalled() -> None:
        consumer = cast(Any, app.consumer)
        state = generations.current(consumer_generation(app))
        streams = {tp for tp in consumer.assignment() if tp.topic == events_topic}
        stalls.keep_only(streams)
        if not streams or state is None:
            return
        try:
            ends = await consumer.highwaters(*streams)
        except (KafkaError, ConsumerNotStarted, TimeoutError):
            return  # the broker away: nothing is fetched anyway
        fetched = consumer._get_active_partitions()  # Faust 0.15: no public accessor
        now = time.monotonic()
        for tp in sorted(streams):
            reached = state.reached(tp.partition)
            if stalls.stalled(tp, reached, ends.get(tp), tp in fetched, now):
                log.warning(
                    "%s:%d has records past offset %s (end %s) that Faust has not fetched for "
                    "%.0f s (paused: %s, buffer full: %s): fetching it again",
                    tp.topic, tp.partition, reached, ends.get(tp), STALL_PATIENCE_S,
                    tp in consumer._paused_partitions, tp in consumer._buffered_partitions,
                )  # fmt: skip
                consumer.resume_partitions({tp})
                consumer.on_buffer_drop(tp)
