"""How many copies of each topic the cluster keeps, and what an existing topic lacks (pure).

forge.events is the source of truth: on a cluster, every topic forge-rl creates is replicated
(Kafka's durable setting: replication factor 3, ``min.insync.replicas`` 2, producers
``acks=all``), so one broker can be lost with nothing acknowledged lost and nobody waiting.
By default the factor is min(3, brokers) — a single local broker keeps one copy, as before —
and the minimum in-sync replicas one fewer, at least 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.errors import ConfigError


@dataclass(frozen=True)
class Replication:
    factor: int | None = None
    """Copies of each partition; None: min(3, brokers in the cluster)."""
    min_insync: int | None = None
    """``min.insync.replicas``; None: factor - 1, at least 1."""

    def resolved(self, brokers: int) -> tuple[int, int]:
        """(factor, min in-sync) on a cluster of ``brokers``; a ConfigError when it cannot
        hold them."""
        factor = self.factor if self.factor is not None else min(3, max(brokers, 1))
        if factor > brokers:
            raise ConfigError(
                f"replication factor {factor} needs {factor} brokers; the cluster at the "
                f"bootstrap has {brokers}: add brokers or set FORGE_KAFKA_REPLICATION_FACTOR"
            )
        min_insync = self.min_insync if self.min_insync is not None else max(1, factor - 1)
        if not 1 <= min_insync <= factor:
            raise ConfigError(
                f"min.insync.replicas {min_insync} must be between 1 and the replication "
                f"factor {factor}"
            )
        return factor, min_insync


@dataclass(frozen=True)
class TopicFound:
    """What the cluster holds of a topic forge-rl would have created."""

    name: str
    partitions: int
    factor: int
    """The fewest replicas of any of its partitions."""
    min_insync: int


def shortfalls(found: TopicFound, partitions: int, factor: int, min_insync: int) -> list[str]:
    """Warnings for an existing topic that keeps fewer copies than configured or another
    partition count than forge-rl would give it, each naming the topic and the remedy."""
    out = []
    if found.factor < factor:
        out.append(
            f"{found.name} has replication factor {found.factor}, below the configured {factor}: "
            f"one broker lost can lose its records; raise it with kafka-reassign-partitions"
        )
    if found.min_insync < min_insync:
        out.append(
            f"{found.name} has min.insync.replicas {found.min_insync}, below the configured "
            f"{min_insync}; set it with kafka-configs --alter --entity-type topics "
            f"--entity-name {found.name} --add-config min.insync.replicas={min_insync}"
        )
    if found.partitions != partitions:
        out.append(
            f"{found.name} has {found.partitions} partitions, not the configured {partitions}: "
            "it is used as it is (docs/running.md, growing the partitions of a log)"
        )
    return out
