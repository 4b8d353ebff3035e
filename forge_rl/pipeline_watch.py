"""What the pipeline is doing, read from its topics: event counts, samples, training steps.

Samples are counted as records read from the train topic (committed ones only): its end offset
also counts the markers every transaction leaves. The samples trained per domain are summed
over training steps, each step once (the trainer may publish one again after a restart).
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field, replace

from kafka import TopicPartition

from infra.kafka_clients import sync_consumer
from schemas import codec
from schemas.errors import SchemaError
from schemas.records import TrainStep


@dataclass(frozen=True)
class PipelineSnapshot:
    events: int = 0
    events_per_s: float = 0.0
    samples: int = 0
    """Ordered samples in the train topic (records, not offsets)."""
    last_step: TrainStep | None = None
    trained_by_domain: dict[str, int] = field(default_factory=dict)
    """Samples trained so far, per domain."""


class PipelineWatch(threading.Thread):
    """Polls end offsets and the metrics topic once a second; ``snapshot`` is always current."""

    def __init__(
        self, bootstrap: str, events_topic: str, train_topic: str, metrics_topic: str
    ) -> None:
        super().__init__(name="pipeline-watch", daemon=True)
        self.bootstrap = bootstrap
        self.topics = (events_topic, train_topic, metrics_topic)
        self.snapshot = PipelineSnapshot()
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)

    def run(self) -> None:
        events_topic, train_topic, metrics_topic = self.topics
        consumer = sync_consumer(
            self.bootstrap, enable_auto_commit=False, isolation_level="read_committed"
        )
        try:
            partitions = sorted(consumer.partitions_for_topic(events_topic) or ())
            events = [TopicPartition(events_topic, p) for p in partitions]
            train = TopicPartition(train_topic, 0)
            metrics = TopicPartition(metrics_topic, 0)
            consumer.assign([metrics, train])
            consumer.seek_to_beginning(metrics, train)
            recent: deque[tuple[float, int]] = deque(maxlen=10)  # the rate over ~10 s
            samples, trained, steps_seen = 0, Counter[str](), set[int]()
            while not self._stop_event.is_set():
                ends = consumer.end_offsets(events)
                total = sum(ends[tp] for tp in events)
                now = time.monotonic()
                recent.append((now, total))
                then, before = recent[0]
                rate = (total - before) / (now - then) if now > then else 0.0
                step = self.snapshot.last_step
                for tp, messages in consumer.poll(timeout_ms=200).items():
                    if tp == train:
                        samples += len(messages)
                        continue
                    for message in messages:
                        try:
                            step = codec.decode(message.value, TrainStep)
                        except SchemaError:
                            continue  # the streams worker dead-letters it
                        if step.step not in steps_seen:
                            steps_seen.add(step.step)
                            trained.update(step.domain_samples)
                self.snapshot = replace(
                    self.snapshot, events=total, events_per_s=rate, samples=samples,
                    last_step=step, trained_by_domain=dict(trained),
                )  # fmt: skip
                self._stop_event.wait(1.0)
        finally:
            consumer.close()
