"""The watermarks' two tasks (``streams.event_time.watermarks``): every ``group_check_s`` this
worker writes how far it has processed each forge.events partition it owns, a round in one record,
and it follows the watermark topic — every worker's rounds, in the order they were written —
into its horizon, telling ``moved`` after each read.

Each round is keyed by its events topic and the lowest partition its worker owns: compacted,
the topic keeps at most one round a partition, however many workers start over a long run (a
key a worker start kept one round for each). Two workers never own the same lowest partition
for long, and a round superseded under its key is older than its successor's.
An app id serves one events topic: its marks, claims and floors are that topic's (a mark's
offsets mean nothing on another), so a worker pointed at another topic under the same app id
is refused at start (``other_events_topics``)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import faust
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError
from faust.exceptions import ConsumerNotStarted
from faust.types import TP
from kafka import TopicPartition as KafkaTopicPartition

from infra.kafka_clients import async_consumer, sync_consumer
from streams.event_time.live_state import Generations, LiveState
from streams.event_time.watermarks import SharedHorizon, Watermark, decode_round, encode_round
from streams.faust_transport import consumer_generation
from streams.stalls import Stalls, stage_name, watermarks_stage

log = logging.getLogger(__name__)


def send_watermarks(
    app: faust.App,
    generations: Generations,
    take_over: Callable[[LiveState, int], Awaitable[object]],
    *,
    events_topic: str,
    watermarks: faust.types.TopicT,
    group_check_s: float,
    stalls: Stalls,
) -> None:
    """Adds the sending task to ``app``; ``take_over`` sets up an owned partition that has
    had no record yet in this generation, so every owned partition has a mark and a claim.
    ``stalls`` hears of each owned partition with records to read that processes none."""

    async def send_round(state: LiveState) -> None:
        owned = {tp.partition for tp in app.consumer.assignment() if tp.topic == events_topic}
        state.progress.keep_only(owned)
        tps = [TP(events_topic, p) for p in sorted(owned)]
        for tp in tps:
            await take_over(state, tp.partition)
        if not tps or generations.current(consumer_generation(app)) is not state:
            return
        ends = await app.consumer.highwaters(*tps)  # asked of the broker now, not cached
        now = time.monotonic()
        marks = [state.progress.mark(tp.partition, ends.get(tp), now) for tp in tps]
        tell_reads(stalls, marks, now)
        key = round_key(events_topic, tps[0].partition)
        await (await watermarks.send(key=key, value=encode_round(marks), partition=0))

    @app.task
    async def send_watermarks_regularly() -> None:
        """Each round is written before the next one's check, as the horizon's rule needs
        (mode's timer keeps its pace)."""
        async for _ in app.itertimer(group_check_s, name="watermarks"):
            state = generations.state_in(consumer_generation(app))
            if state is None:
                continue
            try:
                await send_round(state)
            except (KafkaError, ConsumerNotStarted, TimeoutError) as error:
                log.warning("watermarks skipped this round: %s", error)  # the broker away


def tell_reads(stalls: Stalls, marks: list[Watermark], now: float) -> None:
    for mark in marks:
        stage = stage_name(mark.partition, "reads")
        if mark.caught_up:
            stalls.succeeded(stage)
        else:
            note = f"records from offset {mark.counted} on not processed"
            stalls.behind(stage, mark.counted, now, note)


def round_key(events_topic: str, lowest_partition: int) -> bytes:
    return f"{events_topic}/{lowest_partition}".encode()


def _events_topic_of(key: bytes | None) -> str | None:
    topic, slash, _ = (key or b"").decode(errors="replace").rpartition("/")
    return topic if slash else None


def other_events_topics(bootstrap: str, topic: str, events_topic: str) -> set[str]:
    """The events topics other than ``events_topic`` whose marks the watermark ``topic``
    holds (read whole at start: compacted, a few records a partition)."""
    consumer = sync_consumer(bootstrap, enable_auto_commit=False)
    try:
        tp = KafkaTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        found: set[str] = set()
        while consumer.position(tp) < end:
            for records in consumer.poll(timeout_ms=1000).values():
                found |= {t for r in records if (t := _events_topic_of(r.key)) is not None}
        return found - {events_topic}
    finally:
        consumer.close()


def add_watermark_follower(
    app: faust.App,
    bootstrap: str,
    topic: str,
    events_topic: str,
    horizon: SharedHorizon,
    moved: asyncio.Event,
    heard: Callable[[list[Watermark]], None],
) -> None:
    """The following task (``follow_watermarks``), added to ``app``."""

    @app.task
    async def read_watermarks() -> None:
        await follow_watermarks(bootstrap, topic, events_topic, horizon, moved, heard)


def hear_watermarks(stalls: Stalls, partitions: int) -> Callable[[list[Watermark]], None]:
    """What tells ``stalls`` of each partition's marks read: one not heard of for the limit
    (from now on) holds the horizon."""
    note = "no watermark of it read: group timeouts wait on its owner"
    for partition in range(partitions):
        stalls.heard(watermarks_stage(partition), time.monotonic(), note)

    def heard(marks: list[Watermark]) -> None:
        for mark in marks:
            stalls.heard(watermarks_stage(mark.partition), time.monotonic(), note)

    return heard


async def follow_watermarks(
    bootstrap: str,
    topic: str,
    events_topic: str,
    horizon: SharedHorizon,
    moved: asyncio.Event,
    heard: Callable[[list[Watermark]], None],
) -> None:
    """Read the watermark topic from its start, for good, into ``horizon``: the marks of
    ``events_topic``, a round at a time; what is not a round of watermarks is skipped with a
    warning. ``moved`` is set, and ``heard`` told, after each round read."""
    consumer = async_consumer(bootstrap, enable_auto_commit=False, fetch_max_wait_ms=100)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        while True:
            for records in (await consumer.getmany(tp, timeout_ms=1000)).values():
                for record in records:
                    if _events_topic_of(record.key) != events_topic:
                        continue
                    try:
                        marks = decode_round(record.value or b"")
                    except ValueError as error:
                        log.warning("%s@%d is no watermark: %s", topic, record.offset, error)
                    else:
                        horizon.read_round(*marks)
                        heard(marks)
                        moved.set()
    finally:
        await consumer.stop()
