"""Prometheus /metrics of the streams worker and the trainer, on a port of their own.

Each service keeps its metrics in a registry of its own (tests build many) holding the process
collectors — CPU seconds, resident memory, open files, GC — and its service numbers;
``serve_metrics`` exposes the registry with prometheus_client's HTTP server on
FORGE_METRICS_PORT (unset: nothing is served), bound to FORGE_METRICS_BIND (127.0.0.1 unless a
scraper on another host or container needs it). The gateway serves /metrics on its own port.

The streams worker's numbers are read from Faust's monitor when scraped, so its agents carry
no metrics code; the trainer's come from each TrainStep it publishes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from schemas.errors import InfraError
from schemas.records import TrainStep


def process_registry() -> CollectorRegistry:
    """A registry with the process, platform and GC collectors the default registry has."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


@dataclass
class MetricsServer:
    """prometheus_client's HTTP server thread; ``close`` stops it."""

    server: WSGIServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        return int(self.server.server_port)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve_metrics(registry: CollectorRegistry, port: int | None, bind: str) -> MetricsServer | None:
    """Serve ``registry`` at http://bind:port/metrics; None when no port is configured."""
    if port is None:
        return None
    try:
        server, thread = start_http_server(port, addr=bind, registry=registry)
    except OSError as exc:
        raise InfraError(f"metrics port {bind}:{port}: {exc.strerror or exc}") from exc
    return MetricsServer(server, thread)


class FaustMonitor(Protocol):
    """What the worker's metrics read from ``faust.App.monitor``."""

    @property
    def messages_received_by_topic(self) -> Mapping[str, int]: ...
    @property
    def events_s(self) -> int: ...
    @property
    def tp_end_offsets(self) -> Mapping[Any, int]: ...
    @property
    def tp_read_offsets(self) -> Mapping[Any, int]: ...
    @property
    def tp_committed_offsets(self) -> Mapping[Any, int]: ...


def consumer_lag(
    end: Mapping[Any, int], read: Mapping[Any, int], committed: Mapping[Any, int]
) -> dict[str, int]:
    """Records not yet read, per topic, over partitions keyed by ``(topic, partition)`` tuples.

    ``end`` is the next offset to be written; the next to read is the one after the last read,
    else the committed position. A partition with neither is left out (not positioned yet).
    """
    lag: dict[str, int] = {}
    for tp, end_offset in end.items():
        if tp in read:
            position = read[tp] + 1
        elif tp in committed:
            position = committed[tp]
        else:
            continue
        lag[tp[0]] = lag.get(tp[0], 0) + max(0, end_offset - position)
    return lag


class _WorkerCollector(Collector):
    """The worker's numbers, read when scraped (from the server thread: snapshots only)."""

    def __init__(
        self,
        monitor: FaustMonitor,
        events_topic: str,
        open_groups: Callable[[], int],
    ) -> None:
        self.monitor = monitor
        self.events_topic = events_topic
        self.open_groups = open_groups

    def collect(self) -> Iterator[Metric]:
        m = self.monitor
        received = dict(m.messages_received_by_topic)
        yield CounterMetricFamily(
            "forge_streams_events", "Records read from the events topic",
            value=received.get(self.events_topic, 0),
        )  # fmt: skip
        yield GaugeMetricFamily(
            "forge_streams_events_per_second", "Events the worker's agents processed in the "
            "last second (Faust's monitor)", value=m.events_s,
        )  # fmt: skip
        try:
            open_groups = self.open_groups()
        except RuntimeError:  # the table changed size while counted: no value this scrape
            pass
        else:
            yield GaugeMetricFamily(
                "forge_streams_open_groups", "Groups waiting for members or their timeout",
                value=open_groups,
            )  # fmt: skip
        lag = GaugeMetricFamily(
            "forge_streams_consumer_lag", "Records not yet read, by topic", labels=["topic"]
        )
        ends = dict(m.tp_end_offsets)
        for topic, records in consumer_lag(ends, dict(m.tp_read_offsets),
                                           dict(m.tp_committed_offsets)).items():  # fmt: skip
            lag.add_metric([topic], records)
        yield lag


class StreamsMetrics:
    """The streams worker's registry: process metrics, Faust's counts, samples emitted."""

    def __init__(
        self,
        monitor: FaustMonitor,
        *,
        events_topic: str,
        open_groups: Callable[[], int],
    ) -> None:
        self.registry = process_registry()
        self.registry.register(_WorkerCollector(monitor, events_topic, open_groups))
        self.trajectories = Counter(
            "forge_streams_trajectories", "Scored trajectories committed",
            registry=self.registry,
        )  # fmt: skip
        self.samples = Counter(
            "forge_streams_samples", "Ordered samples written to the train topic",
            registry=self.registry,
        )  # fmt: skip


class TrainerMetrics:
    """The trainer's registry: process metrics and the numbers of each step."""

    def __init__(self) -> None:
        r = self.registry = process_registry()
        self.step = Gauge("forge_trainer_step", "Optimizer steps taken", registry=r)
        self.policy_version = Gauge(
            "forge_trainer_policy_version", "Newest policy version exported", registry=r
        )
        self.loss = Gauge("forge_trainer_loss", "Loss of the last step", registry=r)
        self.step_seconds = Histogram(
            "forge_trainer_step_seconds", "Time of a step, waiting for samples excluded",
            registry=r, buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
        )  # fmt: skip
        self.samples = Counter("forge_trainer_samples", "Samples trained on", registry=r)
        self.skipped = Counter(
            "forge_trainer_skipped_steps", "Steps skipped for a non-finite gradient", registry=r
        )
        self.staleness = Gauge(
            "forge_trainer_staleness_mean", "Mean staleness of the last step's samples (policy "
            "versions)", registry=r,
        )  # fmt: skip

    def observe(self, step: TrainStep) -> None:
        """Record one published TrainStep."""
        self.step.set(step.step)
        self.policy_version.set(step.policy_version)
        self.loss.set(step.loss)
        self.step_seconds.observe(step.step_time_s)
        self.samples.inc(step.samples)
        self.staleness.set(step.staleness_mean)
        if step.skipped_nonfinite:
            self.skipped.inc()
