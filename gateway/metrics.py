"""Prometheus metrics of one gateway app (own registry, so tests can build many apps)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector


@dataclass
class GatewayMetrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        ProcessCollector(registry=r)  # CPU, resident memory, open files of this process
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
        # Bound once: a `labels()` lookup takes a lock and checks its values on every call.
        self.prompt_tokens = self.tokens.labels("prompt")
        self.new_prompt_tokens = self.tokens.labels("prompt_new")
        self.completion_tokens = self.tokens.labels("completion")
        self.max_tokens_clamped = Counter(
            "forge_gateway_max_tokens_clamped",
            "Calls served with max_tokens lowered to the room the context left",
            registry=r,
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
        self.calls_in_flight = Gauge(
            "forge_gateway_calls_in_flight", "Model calls the engine is generating", registry=r
        )
        self.policy_version = Gauge(
            "forge_gateway_policy_version", "Policy version the engine serves", registry=r
        )
        self.engine_up = Gauge(
            "forge_gateway_engine_up",
            "1 while the engine serves calls, 0 while it is down",
            registry=r,
        )
        self.rollouts = Counter(
            "forge_gateway_rollouts", "Rollouts by how they ended", ["status"], registry=r
        )


UNMATCHED_TEMPLATES = 64
"""Distinct labels kept for paths no route matches; beyond them, ``unmatched:other``."""
_SEGMENT = re.compile(r"[a-z][a-z0-9_.-]{0,31}")


def unmatched_label(path: str) -> str:
    """A bounded label for a path no route serves: ``unmatched:`` and its first three
    segments, a rollout's id as ``{rollout_id}`` and any segment that is not a short
    lower-case word as ``{id}`` (``/rollouts/ab12/v1/messages`` ->
    ``unmatched:/rollouts/{rollout_id}/v1/messages``)."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "rollouts":
        head, parts = ["rollouts", "{rollout_id}"], parts[2:]
    else:
        head = []
    shown = [p if _SEGMENT.fullmatch(p) else "{id}" for p in parts[:3]]
    more = "/…" if len(parts) > 3 else ""
    return f"unmatched:/{'/'.join([*head, *shown])}{more}"


class MetricsMiddleware:
    """Counts requests and times them per route (pure ASGI: no per-request task overhead)."""

    def __init__(self, app: Any, metrics: GatewayMetrics) -> None:
        self.app = app
        self.metrics = metrics
        self._series: dict[tuple[str, int], tuple[Any, Any]] = {}
        """(request counter, latency histogram) children by (route, status), bound once."""
        self._unmatched: set[str] = set()

    def _observed(self, endpoint: str, status: int) -> tuple[Any, Any]:
        series = self._series.get((endpoint, status))
        if series is None:
            requests = self.metrics.requests.labels(endpoint, str(status))
            series = self._series[endpoint, status] = (
                requests,
                self.metrics.latency.labels(endpoint),
            )
        return series

    def _unmatched_label(self, path: str) -> str:
        label = unmatched_label(path)
        if label not in self._unmatched:
            if len(self._unmatched) >= UNMATCHED_TEMPLATES:
                return "unmatched:other"
            self._unmatched.add(label)
        return label

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def observed_send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, observed_send)
        finally:
            route = scope.get("route")
            requests, latency = self._observed(
                route.path if route is not None else self._unmatched_label(scope["path"]), status
            )
            requests.inc()
            latency.observe(time.perf_counter() - started)
