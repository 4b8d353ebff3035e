"""Prometheus metrics of one gateway app (own registry, so tests can build many apps)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


@dataclass
class GatewayMetrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.requests = Counter(
            "forge_gateway_requests", "HTTP requests", ["endpoint", "status"], registry=r
        )
        self.latency = Histogram(
            "forge_gateway_request_seconds", "Request latency", ["endpoint"], registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )  # fmt: skip
        self.tokens = Counter(
            "forge_gateway_tokens", "Tokens seen by the engine", ["kind"], registry=r
        )
        self.drift = Counter(
            "forge_gateway_retokenization_drift",
            "Calls whose messages extend an earlier call but whose tokens do not",
            registry=r,
        )
        self.produce_latency = Histogram(
            "forge_gateway_produce_seconds", "Time until Kafka acknowledged a call's events",
            registry=r,
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1),
        )  # fmt: skip
        self.policy_version = Gauge(
            "forge_gateway_policy_version", "Policy version the engine serves", registry=r
        )
        self.rollouts = Counter(
            "forge_gateway_rollouts", "Rollouts by how they ended", ["status"], registry=r
        )
