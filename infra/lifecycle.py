"""`infra up/down/status`: the broker (local or external), its topics and the analytics tables."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace

from infra.analytics import analytics_client, ensure_tables
from infra.config import InfraSettings
from infra.kafka_clients import ensure_topics
from infra.local_broker import BrokerStatus, LocalBroker
from infra.local_cluster import LocalCluster
from schemas.topics import ALL_TOPICS, EVENTS, TRAJECTORIES, TopicSpec


@dataclass(frozen=True)
class InfraReport:
    bootstrap: str
    local: bool
    topics_created: list[str]
    analytics: str
    broker: BrokerStatus | None


def local_broker(settings: InfraSettings) -> LocalBroker | LocalCluster:
    """The local Kafka of ``settings.home``: a cluster when ``kafka_brokers`` asks for one, or
    when one was started there and not stopped (so `status`, `down` and `run` find it), else
    the broker alone."""
    if settings.kafka_brokers > 1:
        return _cluster(settings, settings.kafka_brokers)
    layout = settings.home / "kafka-cluster" / "cluster.json"
    if layout.exists():
        cluster = _cluster(settings, len(json.loads(layout.read_text())["ports"]))
        if cluster.started():
            return cluster
    return LocalBroker(
        settings.home / "kafka", version=settings.kafka_version, cache_dir=settings.cache_dir,
        port=settings.kafka_port, controller_port=settings.kafka_controller_port,
        heap=settings.kafka_heap, startup_timeout_s=settings.kafka_startup_timeout_s,
    )  # fmt: skip


def _cluster(settings: InfraSettings, size: int) -> LocalCluster:
    return LocalCluster(
        settings.home / "kafka-cluster", size, version=settings.kafka_version,
        cache_dir=settings.cache_dir, port=settings.kafka_port,
        controller_port=settings.kafka_controller_port, heap=settings.kafka_heap,
        startup_timeout_s=settings.kafka_startup_timeout_s,
    )  # fmt: skip


def forge_topics(settings: InfraSettings) -> tuple[TopicSpec, ...]:
    """Every topic forge-rl needs, forge.events and forge.trajectories with the configured
    partitions."""
    scaled = {EVENTS.name, TRAJECTORIES.name}
    return tuple(
        replace(spec, partitions=settings.kafka_events_partitions) if spec.name in scaled else spec
        for spec in ALL_TOPICS
    )


def ensure_service_topics(
    settings: InfraSettings, bootstrap: str, names: Mapping[str, str]
) -> list[str]:
    """The topics a service writes, created (partitions and replication from ``settings``)
    before it produces anything, so none is auto-created with a cluster's defaults: ``names``
    maps each topic's standard name to the one the service is configured with."""
    specs = {spec.name: spec for spec in forge_topics(settings)}
    wanted = tuple(replace(specs[standard], name=name) for standard, name in names.items())
    return ensure_topics(bootstrap, wanted, settings.kafka_connect_timeout_s, settings.replication)


def analytics_location(settings: InfraSettings) -> str:
    return settings.clickhouse_url or f"chdb://{settings.chdb_path}"


def infra_up(settings: InfraSettings, *, with_analytics: bool = True) -> InfraReport:
    """Bring up what is missing; a second call changes nothing."""
    broker = None
    if settings.kafka_bootstrap:
        bootstrap = settings.kafka_bootstrap
    else:
        broker = local_broker(settings)
        bootstrap = broker.up().bootstrap
    created = ensure_topics(
        bootstrap, forge_topics(settings), settings.kafka_connect_timeout_s, settings.replication
    )
    if with_analytics:
        client = analytics_client(settings)
        try:
            ensure_tables(client)
        finally:
            client.close()
    return InfraReport(
        bootstrap=bootstrap,
        local=broker is not None,
        topics_created=created,
        analytics=analytics_location(settings),
        broker=broker.status() if broker else None,
    )


def bootstrap_servers(settings: InfraSettings) -> str | None:
    """Where Kafka is: the configured cluster, or the running local broker, or None."""
    if settings.kafka_bootstrap:
        return settings.kafka_bootstrap
    status = local_broker(settings).status()
    return status.state.bootstrap if status.running and status.state else None
