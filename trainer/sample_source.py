"""Ordered samples from forge.train (or a replay's topic), resumable at an exact offset."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from infra.kafka_clients import decode_message, sync_consumer
from schemas import codec
from schemas.records import DeadLetter, TrainSample
from schemas.topics import DLQ, TopicSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Batch:
    samples: list[TrainSample]
    next_offset: int
    """Offset of the first record after this batch: where a restart resumes."""


class SampleSource:
    """Reads one single-partition topic in order; undecodable records go to forge.dlq."""

    def __init__(
        self, bootstrap: str, spec: TopicSpec, dlq: KafkaProducer, *, start_offset: int
    ) -> None:
        self.spec = spec
        self.dlq = dlq
        self.tp = TopicPartition(spec.name, 0)
        self.consumer: KafkaConsumer = sync_consumer(bootstrap, enable_auto_commit=False)
        self.consumer.assign([self.tp])
        self.consumer.seek(self.tp, start_offset)
        self.position = start_offset

    def next_batch(self, size: int, poll_timeout_s: float, idle_exit_s: float | None) -> Batch:
        """Block until ``size`` samples arrived, or with ``idle_exit_s`` until the topic idles."""
        samples: list[TrainSample] = []
        idle_since = time.monotonic()
        while len(samples) < size:
            records = self.consumer.poll(
                timeout_ms=int(poll_timeout_s * 1000), max_records=size - len(samples)
            ).get(self.tp, [])
            if not records:
                if idle_exit_s is not None and time.monotonic() - idle_since > idle_exit_s:
                    break
                continue
            idle_since = time.monotonic()
            for msg in records:
                result = decode_message(
                    self.spec,
                    partition=msg.partition,
                    offset=msg.offset,
                    key=msg.key,
                    value=msg.value,
                    consumer="forge-trainer",
                )
                if isinstance(result, DeadLetter):
                    log.warning(
                        "dead-lettered %s@%d: %s", self.spec.name, msg.offset, result.reason
                    )
                    self.dlq.send(DLQ.name, codec.encode(result), key=msg.key).get(timeout=30)
                else:
                    assert isinstance(result.record, TrainSample)
                    samples.append(result.record)
                self.position = msg.offset + 1
        return Batch(samples, self.position)

    def close(self) -> None:
        self.consumer.close()
