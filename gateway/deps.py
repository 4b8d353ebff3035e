"""The app's collaborators as FastAPI dependencies, for routers declared at module level.

``create_app`` puts them on ``app.state``; each ``*Dep`` alias reads one back, typed. Every
dependency is a coroutine: FastAPI runs plain functions in a thread pool (~1 ms a request).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from gateway.auth import Auth
from gateway.chat_tokenizer import ChatTokenizer
from gateway.config import GatewaySettings
from gateway.engine import Engine
from gateway.metrics import GatewayMetrics
from gateway.rollouts import Rollout
from gateway.service import RolloutService


async def get_settings(request: Request) -> GatewaySettings:
    settings: GatewaySettings = request.app.state.settings
    return settings


async def get_service(request: Request) -> RolloutService:
    service: RolloutService = request.app.state.service
    return service


async def get_auth(request: Request) -> Auth:
    auth: Auth = request.app.state.auth
    return auth


async def get_tokenizer(request: Request) -> ChatTokenizer:
    tokenizer: ChatTokenizer = request.app.state.tokenizer
    return tokenizer


async def get_engine(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


async def get_metrics(request: Request) -> GatewayMetrics:
    metrics: GatewayMetrics = request.app.state.metrics
    return metrics


SettingsDep = Annotated[GatewaySettings, Depends(get_settings)]
ServiceDep = Annotated[RolloutService, Depends(get_service)]
AuthDep = Annotated[Auth, Depends(get_auth)]
TokenizerDep = Annotated[ChatTokenizer, Depends(get_tokenizer)]
EngineDep = Annotated[Engine, Depends(get_engine)]
MetricsDep = Annotated[GatewayMetrics, Depends(get_metrics)]


async def require_admin(request: Request, auth: AuthDep) -> None:
    """The admin key."""
    await auth.admin(request)


async def require_any_key(request: Request, auth: AuthDep) -> None:
    """The admin key or any open rollout's key."""
    await auth.any_key(request)


async def get_open_rollout(request: Request, auth: AuthDep) -> Rollout:
    """The running rollout the request acts on, which its key may act on."""
    return await auth.open_rollout(request)


OpenRolloutDep = Annotated[Rollout, Depends(get_open_rollout)]
