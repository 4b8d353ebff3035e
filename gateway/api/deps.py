"""The app's collaborators as FastAPI dependencies, for routers declared at module level.

``create_app`` puts them on ``app.state`` as one ``Gateway``; ``GatewayDep`` reads it back,
typed, and the key checks and the open rollout build on it. Every
dependency is a coroutine: FastAPI runs plain functions in a thread pool (~1 ms a request).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from gateway.api.auth import Auth
from gateway.call.rendering import Renderer
from gateway.call.rollouts import Rollout
from gateway.call.service import RolloutService
from gateway.config import GatewaySettings
from gateway.engines.chat_tokenizer import ChatTokenizer
from gateway.engines.engine import Engine
from gateway.metrics import GatewayMetrics


@dataclass(frozen=True)
class Gateway:
    """What the routes work with, as one dependency: FastAPI solves every dependency of every
    request anew, and one per collaborator cost the gateway ~12% more CPU a call (measured
    with bench/gateway.py)."""

    settings: GatewaySettings
    service: RolloutService
    auth: Auth
    tokenizer: ChatTokenizer
    engine: Engine
    metrics: GatewayMetrics
    renderer: Renderer
    renderer_note: str
    """Which format renders and parses, and why (for /health)."""


async def get_gateway(request: Request) -> Gateway:
    gateway: Gateway = request.app.state.gateway
    return gateway


GatewayDep = Annotated[Gateway, Depends(get_gateway)]


async def require_admin(request: Request, gateway: GatewayDep) -> None:
    """The admin key."""
    await gateway.auth.admin(request)


async def require_any_key(request: Request, gateway: GatewayDep) -> None:
    """The admin key or any open rollout's key."""
    await gateway.auth.any_key(request)


@dataclass(frozen=True)
class RolloutRequest:
    """A request acting on an open rollout its key may act on, and what serves it: one
    dependency for the calls agents make most."""

    gateway: Gateway
    rollout: Rollout


async def get_rollout_request(request: Request) -> RolloutRequest:
    gateway: Gateway = request.app.state.gateway
    return RolloutRequest(gateway, await gateway.auth.open_rollout(request))


RolloutRequestDep = Annotated[RolloutRequest, Depends(get_rollout_request)]
