"""Ordered samples from forge.train (or a replay's topic), resumable at an exact offset."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.consumer.fetcher import ConsumerRecord

from infra.kafka_clients import decode_message, sync_consumer
from schemas import codec
from schemas.records import DeadLetter, TrainSample
from schemas.topics import DLQ, TopicSpec

log = logging.getLogger(__name__)

CONSUMER = "forge-trainer"

SampleCheck = Callable[[TrainSample], str | None]
"""Why a decoded sample cannot be trained, or None (``trainer.sample_check.check_sample``)."""


@dataclass(frozen=True)
class Batch:
    samples: list[TrainSample]
    next_offset: int
    """Offset of the first record after this batch: where a restart resumes."""
    dead_lettered: int = 0
    """Records between the previous batch and ``next_offset`` sent to forge.dlq instead."""
    stopped: bool = False
    """Reading was cut short by a stop request: not to be trained, and ``next_offset`` not to
    be stored (a restart reads these samples again)."""


class SampleSource:
    """Reads one single-partition topic in order; records that do not decode, or decode to a
    sample ``check`` rejects, go to forge.dlq with the reason and are skipped."""

    def __init__(
        self,
        bootstrap: str,
        spec: TopicSpec,
        dlq: KafkaProducer,
        *,
        start_offset: int,
        check: SampleCheck | None = None,
    ) -> None:
        self.spec = spec
        self.dlq = dlq
        self.check = check
        self.tp = TopicPartition(spec.name, 0)
        self.consumer: KafkaConsumer = sync_consumer(bootstrap, enable_auto_commit=False)
        self.consumer.assign([self.tp])
        self.consumer.seek(self.tp, start_offset)
        self.position = start_offset

    def next_batch(
        self,
        size: int,
        poll_timeout_s: float,
        idle_exit_s: float | None,
        on_poll: Callable[[], None] | None = None,
        stopping: Callable[[], bool] | None = None,
    ) -> Batch:
        """Block until ``size`` samples arrived, or with ``idle_exit_s`` until the topic idles;
        ``on_poll`` is called after every poll (at least every ``poll_timeout_s``), then
        ``stopping``, which ends the wait with a ``stopped`` batch."""
        samples: list[TrainSample] = []
        dead = 0
        idle_since = time.monotonic()
        while len(samples) < size:
            records = self.consumer.poll(
                timeout_ms=int(poll_timeout_s * 1000), max_records=size - len(samples)
            ).get(self.tp, [])
            if on_poll is not None:
                on_poll()
            if stopping is not None and stopping():
                return Batch([], self.position, dead, stopped=True)
            if not records:
                if idle_exit_s is not None and time.monotonic() - idle_since > idle_exit_s:
                    break
                continue
            idle_since = time.monotonic()
            for msg in records:
                result = self._sample_or_dead_letter(msg)
                if isinstance(result, DeadLetter):
                    log.warning(
                        "dead-lettered %s@%d: %s", self.spec.name, msg.offset, result.reason
                    )
                    self.dlq.send(DLQ.name, codec.encode(result), key=msg.key).get(timeout=30)
                    dead += 1
                else:
                    samples.append(result)
                self.position = msg.offset + 1
        return Batch(samples, self.position, dead)

    def _sample_or_dead_letter(self, msg: ConsumerRecord) -> TrainSample | DeadLetter:
        result = decode_message(
            self.spec,
            partition=msg.partition,
            offset=msg.offset,
            key=msg.key,
            value=msg.value,
            consumer=CONSUMER,
        )
        if isinstance(result, DeadLetter):
            return result
        assert isinstance(result.record, TrainSample)
        reason = None if self.check is None else self.check(result.record)
        if reason is None:
            return result.record
        return DeadLetter(
            source_topic=self.spec.name,
            partition=msg.partition,
            offset=msg.offset,
            reason=reason,
            consumer=CONSUMER,
            ts=datetime.now(UTC),
            key=msg.key,
            value=msg.value,
        )

    def close(self) -> None:
        self.consumer.close()
