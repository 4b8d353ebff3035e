"""Reading a bounded range of a topic's log — by offset or by timestamp — for replays."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from kafka import TopicPartition

from infra.kafka_clients import Delivered, decode_message, sync_consumer
from schemas.records import DeadLetter
from schemas.topics import TopicSpec


@dataclass(frozen=True)
class LogRange:
    """Where to start and stop; timestamps are record timestamps in ms since the epoch.

    Offsets apply to every partition (meaningful for single-partition topics or to start at 0).
    The end is exclusive and never beyond the log's end when reading began.
    """

    from_offset: int | None = None
    to_offset: int | None = None
    from_ts_ms: int | None = None
    to_ts_ms: int | None = None


def read_log(
    bootstrap: str, spec: TopicSpec, span: LogRange, *, name: str = "forge-rl-replay"
) -> Iterator[Delivered | DeadLetter]:
    """Yield every record of ``spec`` in ``span``: in offset order within each partition,
    partitions interleaved."""
    consumer = sync_consumer(bootstrap, enable_auto_commit=False)
    try:
        partitions = sorted(consumer.partitions_for_topic(spec.name) or ())
        tps = [TopicPartition(spec.name, p) for p in partitions]
        consumer.assign(tps)
        starts = _positions(consumer, tps, span.from_offset, span.from_ts_ms, default="beginning")
        ends = _positions(consumer, tps, span.to_offset, span.to_ts_ms, default="end")
        remaining = {tp for tp in tps if starts[tp] < ends[tp]}
        consumer.assign(sorted(remaining, key=lambda tp: tp.partition))
        for tp in remaining:
            consumer.seek(tp, starts[tp])
        while remaining:
            for tp, batch in consumer.poll(timeout_ms=1000, max_records=5000).items():
                for msg in batch:
                    if msg.offset >= ends[tp]:
                        break
                    yield decode_message(
                        spec,
                        partition=msg.partition,
                        offset=msg.offset,
                        key=msg.key,
                        value=msg.value,
                        consumer=name,
                    )
                if consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
                    consumer.pause(tp)
    finally:
        consumer.close()


def _positions(
    consumer, tps: list[TopicPartition], offset: int | None, ts_ms: int | None, default: str
) -> dict[TopicPartition, int]:
    beginning = consumer.beginning_offsets(tps)
    end = consumer.end_offsets(tps)
    if ts_ms is not None:
        found = consumer.offsets_for_times({tp: ts_ms for tp in tps})
        return {tp: found[tp].offset if found.get(tp) else end[tp] for tp in tps}
    if offset is not None:
        return {tp: min(max(offset, beginning[tp]), end[tp]) for tp in tps}
    return dict(beginning if default == "beginning" else end)
