"""Settings of the local infrastructure: where state lives and how Kafka/ClickHouse are reached."""

from __future__ import annotations

from pathlib import Path

import platformdirs
from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from infra.replication import Replication
from infra.settings import ForgeSettings
from schemas.topics import EVENTS


def _default_home() -> Path:
    return Path(platformdirs.user_data_dir("forge-rl"))


def _default_cache() -> Path:
    return Path(platformdirs.user_cache_dir("forge-rl"))


class InfraSettings(ForgeSettings):
    model_config = SettingsConfigDict(env_prefix="FORGE_", extra="forbid")

    home: Path = Field(default_factory=_default_home, description="State: broker data, logs, chDB.")
    cache_dir: Path = Field(
        default_factory=_default_cache, description="Downloaded Kafka jars, reused offline."
    )
    kafka_bootstrap: str | None = Field(
        default=None, description="An existing Kafka cluster; when set no local broker is run."
    )
    kafka_version: str = Field(default="4.4.0", pattern=r"^\d+\.\d+\.\d+$")
    kafka_port: int = Field(default=29092, ge=0, le=65535, description="0 picks a free port.")
    kafka_controller_port: int = Field(default=29093, ge=0, le=65535)
    kafka_heap: str = Field(default="512m", pattern=r"^\d+[mg]$")
    kafka_brokers: int = Field(
        default=1,
        ge=1,
        le=9,
        description="Nodes of the local Kafka: one broker, or a cluster of combined "
        "broker+controller nodes (`forge-rl infra up --brokers 3`).",
    )
    kafka_startup_timeout_s: float = Field(default=120.0, gt=0)
    kafka_connect_timeout_s: float = Field(
        default=15.0, gt=0, description="Bounded wait before an unreachable broker is an error."
    )
    kafka_replication_factor: int | None = Field(
        default=None,
        ge=1,
        description="Copies of every topic forge-rl creates; default min(3, brokers in the "
        "cluster). A cluster with fewer brokers is refused at start.",
    )
    kafka_min_insync_replicas: int | None = Field(
        default=None,
        ge=1,
        description="min.insync.replicas of every topic forge-rl creates; default the "
        "replication factor minus one, at least 1.",
    )
    kafka_events_partitions: int = Field(
        default=EVENTS.partitions,
        ge=1,
        description="Partitions of forge.events (and forge.trajectories) when forge-rl creates "
        "them: one streams worker at most per partition. An existing topic keeps its own.",
    )
    clickhouse_url: str | None = Field(
        default=None, description="http(s)://user:pass@host:port/db; unset means embedded chDB."
    )
    metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="Prometheus /metrics of a streams worker or trainer process (one port per "
        "process); unset serves none. The gateway serves /metrics on its own port.",
    )
    metrics_bind: str = Field(
        default="127.0.0.1",
        description="Interface of the metrics port; 0.0.0.0 for a scraper in another container.",
    )

    @field_validator("kafka_bootstrap")
    @classmethod
    def _bootstrap_has_port(cls, value: str | None) -> str | None:
        if value is not None:
            for server in value.split(","):
                host, _, port = server.strip().rpartition(":")
                if not host or not port.isdigit():
                    raise ValueError("expected host:port[,host:port...]")
        return value

    @property
    def replication(self) -> Replication:
        return Replication(self.kafka_replication_factor, self.kafka_min_insync_replicas)

    @property
    def chdb_path(self) -> Path:
        return self.home / "clickhouse"
