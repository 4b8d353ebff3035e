"""Prometheus endpoints: process metrics everywhere, the worker's and the trainer's numbers."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from types import SimpleNamespace

import httpx
import pytest
from prometheus_client import generate_latest

from gateway.metrics import GatewayMetrics
from infra.metrics_server import StreamsMetrics, TrainerMetrics, consumer_lag, serve_metrics
from schemas.errors import InfraError
from schemas.records import TrainStep


def scrape(registry) -> dict[str, float]:
    """Sample name (with labels) -> value, from the exposition text."""
    values = {}
    for line in generate_latest(registry).decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def test_consumer_lag_counts_unread_records_per_topic():
    end = {("events", 0): 10, ("events", 1): 5, ("policy", 0): 3, ("new", 0): 9}
    read = {("events", 0): 6, ("policy", 0): 2}  # last offsets read: next are 7 and 3
    committed = {("events", 1): 5}  # never read here, committed up to the end
    assert consumer_lag(end, read, committed) == {"events": 3, "policy": 0}


def test_the_worker_exposes_faust_counts_open_groups_samples_and_its_process():
    monitor = SimpleNamespace(
        messages_received_by_topic=Counter({"forge.events": 7, "forge.policy": 2}),
        events_s=12,
        tp_end_offsets={("forge.events", 0): 9},
        tp_read_offsets={("forge.events", 0): 6},
        tp_committed_offsets={},
    )
    groups = {"g1": 1, "g2": 2}
    metrics = StreamsMetrics(monitor, events_topic="forge.events", open_groups=lambda: len(groups))
    metrics.samples.inc(5)
    metrics.trajectories.inc(4)
    values = scrape(metrics.registry)
    assert values["forge_streams_events_total"] == 7
    assert values["forge_streams_events_per_second"] == 12
    assert values["forge_streams_trajectories_total"] == 4
    assert values["forge_streams_open_groups"] == 2
    assert values['forge_streams_consumer_lag{topic="forge.events"}'] == 2
    assert values["forge_streams_samples_total"] == 5
    assert values["process_resident_memory_bytes"] > 0


def step(n: int, **overrides) -> TrainStep:
    fields = dict(step=n, policy_version=n, loss=0.25, samples=8, tokens=100, unique_tokens=60,
                  dedup_ratio=1.6, clip_fraction=0.0, staleness_mean=1.5, staleness_max=2,
                  step_time_s=0.3, ts=datetime.now(UTC))  # fmt: skip
    return TrainStep(**{**fields, **overrides})


def test_the_trainer_exposes_each_step():
    metrics = TrainerMetrics()
    metrics.observe(step(1))
    metrics.observe(step(2, loss=-0.5, policy_version=1, skipped_nonfinite=True))
    values = scrape(metrics.registry)
    assert values["forge_trainer_step"] == 2 and values["forge_trainer_loss"] == -0.5
    assert values["forge_trainer_policy_version"] == 1
    assert values["forge_trainer_step_seconds_count"] == 2
    assert values["forge_trainer_samples_total"] == 16
    assert values["forge_trainer_skipped_steps_total"] == 1
    assert values["forge_trainer_staleness_mean"] == 1.5
    assert values["process_cpu_seconds_total"] >= 0


def test_serve_metrics_answers_on_its_port_and_only_when_configured():
    metrics = TrainerMetrics()
    assert serve_metrics(metrics.registry, None, "127.0.0.1") is None
    server = serve_metrics(metrics.registry, 0, "127.0.0.1")
    assert server is not None
    try:
        response = httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=5)
        assert response.status_code == 200 and "forge_trainer_step" in response.text
        with pytest.raises(InfraError, match=f"metrics port 127.0.0.1:{server.port}"):
            serve_metrics(metrics.registry, server.port, "127.0.0.1")
    finally:
        server.close()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=5)


def test_the_gateway_registry_has_process_metrics():
    assert "process_resident_memory_bytes" in scrape(GatewayMetrics().registry)


def test_a_scrape_racing_a_table_change_skips_the_open_groups_gauge_only():
    def counting() -> int:
        raise RuntimeError("dictionary changed size during iteration")

    monitor = SimpleNamespace(messages_received_by_topic={},
                              events_s=0, tp_end_offsets={}, tp_read_offsets={},
                              tp_committed_offsets={})  # fmt: skip
    metrics = StreamsMetrics(monitor, events_topic="e",
                             open_groups=counting)  # fmt: skip
    values = scrape(metrics.registry)
    assert "forge_streams_open_groups" not in values and values["forge_streams_events_total"] == 0


def test_fausts_own_monitor_has_what_the_worker_metrics_read():
    import faust

    app = faust.App("metrics-test", broker="kafka://127.0.0.1:1")
    metrics = StreamsMetrics(app.monitor, events_topic="e",
                             open_groups=lambda: 0)  # fmt: skip
    values = scrape(metrics.registry)
    assert values["forge_streams_events_total"] == 0 and values["forge_streams_open_groups"] == 0
