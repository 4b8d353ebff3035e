"""`forge-rl track`: the trainer's TrainStep records, read back from forge.metrics, logged to
experiment trackers (TensorBoard event files, MLflow runs). The trainer knows nothing of them.

Pure core: ``step_scalars`` turns a TrainStep into {name: value} — every numeric field but the
step itself, booleans as 0/1 — and ``track_steps`` logs each step number once, at
``step=TrainStep.step`` and at the record's own time, to every sink. A restarted trainer
re-publishes the records of its last checkpoint; those copies are skipped by step number (the
first copy seen wins; copies are identical). Deduplication lasts as long as the process: a
second ``forge-rl track --start beginning`` into the same TensorBoard directory logs every step
again (``--start end`` goes on from the topic's end instead).

The sinks are thin adapters behind ``ScalarSink``, importing their library only when built:
install them with the ``tracking`` extra.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from infra.kafka_clients import Delivered, decode_message, sync_consumer
from schemas.errors import ForgeError
from schemas.records import TrainStep
from schemas.topics import METRICS, TopicSpec

log = logging.getLogger(__name__)

PREFIX = "train/"
NOT_SCALARS = frozenset({"step", "ts", "sample_ids"})


class TrackingError(ForgeError):
    """A tracker could not be opened or written (its library's error, translated)."""


def step_scalars(step: TrainStep) -> dict[str, float]:
    """Every numeric field of ``step`` except ``step`` itself, as ``train/<field>``, and the
    samples it trained per domain as ``train/domain_samples/<domain>``."""
    scalars = {}
    for f in dataclasses.fields(step):
        value = getattr(step, f.name)
        if f.name not in NOT_SCALARS and isinstance(value, int | float):  # bool is an int
            scalars[PREFIX + f.name] = float(value)
    for domain, count in step.domain_samples.items():
        scalars[f"{PREFIX}domain_samples/{domain}"] = float(count)
    return scalars


class ScalarSink(Protocol):
    def log(self, step: int, scalars: Mapping[str, float], wall_time: float) -> None: ...

    def close(self) -> None: ...


def track_steps(
    steps: Iterable[TrainStep],
    sinks: Sequence[ScalarSink],
    on_step: Callable[[TrainStep], None] = lambda _: None,
) -> int:
    """Log each step number's first record to every sink; return how many were logged."""
    seen: set[int] = set()
    for step in steps:
        if step.step in seen:
            log.debug("step %d seen already (re-published); skipped", step.step)
            continue
        seen.add(step.step)
        scalars = step_scalars(step)
        for sink in sinks:
            sink.log(step.step, scalars, step.ts.timestamp())
        on_step(step)
    return len(seen)


class TensorBoardSink:
    """Scalar summaries in a TensorBoard event file under ``logdir`` (tensorboard's own writer;
    no torch or TensorFlow)."""

    def __init__(self, logdir: Path, flush_secs: int = 5) -> None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        logdir.mkdir(parents=True, exist_ok=True)
        self.logdir = logdir
        self._writer = EventFileWriter(str(logdir), flush_secs=flush_secs)

    def log(self, step: int, scalars: Mapping[str, float], wall_time: float) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        values = [Summary.Value(tag=name, simple_value=v) for name, v in scalars.items()]
        self._writer.add_event(Event(wall_time=wall_time, step=step, summary=Summary(value=values)))

    def close(self) -> None:
        self._writer.close()


class MlflowSink:
    """Metrics of one MLflow run (created in ``experiment``, made if missing) at
    ``tracking_uri``: a server, or a local store such as ``file:///path``."""

    def __init__(self, tracking_uri: str, experiment: str, run_name: str | None = None) -> None:
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        self._error = MlflowException
        try:
            self._client = MlflowClient(tracking_uri)
            found = self._client.get_experiment_by_name(experiment)
            experiment_id = (
                found.experiment_id if found else self._client.create_experiment(experiment)
            )
            run = self._client.create_run(experiment_id, run_name=run_name)
        except MlflowException as exc:
            raise TrackingError(f"MLflow at {tracking_uri}: {exc}") from exc
        self.run_id: str = run.info.run_id

    def log(self, step: int, scalars: Mapping[str, float], wall_time: float) -> None:
        from mlflow.entities import Metric

        millis = int(wall_time * 1000)
        metrics = [Metric(name, v, millis, step) for name, v in scalars.items()]
        try:
            self._client.log_batch(self.run_id, metrics=metrics)
        except self._error as exc:
            raise TrackingError(f"MLflow run {self.run_id}: {exc}") from exc

    def close(self) -> None:
        self._client.set_terminated(self.run_id)


def decode_steps(spec: TopicSpec, messages: Iterable[Any], consumer: str) -> Iterator[TrainStep]:
    """TrainSteps of Kafka ``messages`` (with partition, offset, key, value); an undecodable
    one is logged and skipped (the streams worker dead-letters forge.metrics' bad records)."""
    for msg in messages:
        result = decode_message(spec, partition=msg.partition, offset=msg.offset, key=msg.key,
                                value=msg.value, consumer=consumer)  # fmt: skip
        if isinstance(result, Delivered) and isinstance(result.record, TrainStep):
            yield result.record
        else:
            log.warning("skipped %s[%d]@%d: %s", spec.name, msg.partition, msg.offset,
                        getattr(result, "reason", "not a TrainStep"))  # fmt: skip


def topic_steps(
    bootstrap: str,
    topic: str = METRICS.name,
    *,
    from_beginning: bool = True,
    idle_exit_s: float | None = None,
) -> Iterator[TrainStep]:
    """TrainSteps read from ``topic`` (every partition, no consumer group, nothing committed),
    from its beginning or its end; endless unless ``idle_exit_s`` passes without a record."""
    from kafka import TopicPartition

    spec = dataclasses.replace(METRICS, name=topic)
    consumer = sync_consumer(bootstrap, enable_auto_commit=False)
    try:
        partitions = [TopicPartition(topic, p)
                      for p in sorted(consumer.partitions_for_topic(topic) or ())]  # fmt: skip
        if not partitions:
            raise TrackingError(f"no topic {topic} on {bootstrap}")
        consumer.assign(partitions)
        if from_beginning:
            consumer.seek_to_beginning(*partitions)
        else:
            consumer.seek_to_end(*partitions)
        last = time.monotonic()
        while idle_exit_s is None or time.monotonic() - last < idle_exit_s:
            for messages in consumer.poll(timeout_ms=500).values():
                last = time.monotonic()
                yield from decode_steps(spec, messages, "forge-rl-track")
    finally:
        consumer.close()
