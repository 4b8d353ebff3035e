"""A 404 that tells the client what went wrong: the method and path it asked for, and every
route the gateway serves (pure). A bare "Not Found" led clients to blame the model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.errors import HttpStatusError

ROLLOUT_PREFIX = "/rollouts/{rollout_id}"


def served_routes(paths: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """``METHOD /path`` of every route in an OpenAPI ``paths`` object, the rollout-prefixed
    copies of the /v1 routes folded into one note."""
    served: set[str] = set()
    for path, operations in paths.items():
        if path.startswith(f"{ROLLOUT_PREFIX}/v1"):
            path = path.removeprefix(ROLLOUT_PREFIX)
        served.update(f"{method.upper()} {path}" for method in operations)
    return sorted(served, key=lambda r: (r.split(" ", 1)[1], r))


def route_not_found(
    method: str, path: str, paths: Mapping[str, Mapping[str, Any]]
) -> HttpStatusError:
    """``paths``: the app's OpenAPI paths (``app.openapi()["paths"]``)."""
    listed = "; ".join(served_routes(paths))
    return HttpStatusError(
        f"no route {method} {path}. This gateway serves: {listed} (every /v1 route also "
        f"under {ROLLOUT_PREFIX}, the base URL a rollout is handed)",
        status=404,
    )
