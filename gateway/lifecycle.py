"""The rollout lifecycle endpoints: start, process signals, finish, abort.

Every number is finite and bounded: one NaN reward turns a group's baseline, then the loss,
then the weights into NaN.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from gateway.auth import Auth
from gateway.config import GatewaySettings
from gateway.rollouts import Rollout
from gateway.service import RolloutService
from schemas.pipeline_file import DEFAULT_DOMAIN, DOMAIN_PATTERN
from schemas.records import TRUNCATED, ProcessSignal, RolloutAborted, RolloutFinished

MAX_ABS_REWARD = 1e6
Reward = Annotated[float, Field(allow_inf_nan=False, ge=-MAX_ABS_REWARD, le=MAX_ABS_REWARD)]
Text = Annotated[str, Field(min_length=1, max_length=256)]


class RolloutCreate(BaseModel):
    task_id: Text
    group_id: Text | None = None
    group_size: int | None = Field(
        default=None, ge=1, le=1024, description="Default: the domain's group size, else 1."
    )
    domain: str = Field(default=DEFAULT_DOMAIN, pattern=DOMAIN_PATTERN)
    metadata: dict[Text, Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=dict, max_length=64
    )


class SignalIn(BaseModel):
    step: int = Field(ge=0, le=1_000_000)
    name: Text
    value: Reward


SignalsIn = SignalIn | Annotated[list[SignalIn], Field(min_length=1, max_length=256)]


class FinishIn(BaseModel):
    status: Text = "success"
    """``truncated``: the environment ended it early as hopeless (scored with its domain's
    truncated outcome unless ``outcome_reward`` is given)."""
    outcome_reward: Reward | None = None
    reason: Annotated[str, Field(max_length=4096)] = ""
    signals: Annotated[list[SignalIn], Field(max_length=256)] = Field(default_factory=list)
    """Process signals sent with the end: stored with it, as if posted just before."""


class AbortIn(BaseModel):
    reason: Annotated[str, Field(min_length=1, max_length=4096)]


def lifecycle_router(settings: GatewaySettings, service: RolloutService, auth: Auth) -> APIRouter:
    router = APIRouter(prefix="/rollouts")
    open_rollout = Depends(auth.open_rollout)

    @router.post("", dependencies=[Depends(auth.admin)])
    async def create_rollout(body: RolloutCreate) -> dict[str, Any]:
        rollout, api_key = await service.start(
            body.task_id, body.group_id, body.group_size, body.metadata, body.domain
        )
        return {
            "rollout_id": rollout.rollout_id,
            "group_id": rollout.group_id,
            "group_size": rollout.group_size,
            "domain": rollout.domain,
            "api_key": api_key,
            "base_url": f"{settings.public_url}/rollouts/{rollout.rollout_id}/v1",
        }

    @router.get("/next-domain", dependencies=[Depends(auth.admin)])
    async def next_domain() -> dict[str, Any]:
        """The domain whose next group the mix wants (``gateway.domain_mix``), and where every
        domain stands: a fleet asks before it starts a group."""
        return service.next_domain()

    @router.post("/{rollout_id}/signals")
    async def signals(body: SignalsIn, rollout: Rollout = open_rollout) -> dict[str, Any]:
        items = body if isinstance(body, list) else [body]
        await service.signal(rollout, [ProcessSignal(s.step, s.name, s.value) for s in items])
        return {"accepted": len(items)}

    @router.post("/{rollout_id}/finish")
    async def finish(body: FinishIn, rollout: Rollout = open_rollout) -> dict[str, Any]:
        event = RolloutFinished(body.status, body.outcome_reward, body.reason)
        status = TRUNCATED if body.status == TRUNCATED else "finished"
        signals = [ProcessSignal(s.step, s.name, s.value) for s in body.signals]
        await service.close(rollout, event, status, body.reason, signals)
        return {"rollout_id": rollout.rollout_id, "status": status}

    @router.post("/{rollout_id}/abort")
    async def abort(body: AbortIn, rollout: Rollout = open_rollout) -> dict[str, Any]:
        """The agent failed (crashed, gave no answer): the group scores it as aborted."""
        await service.close(rollout, RolloutAborted(reason=body.reason), "aborted")
        return {"rollout_id": rollout.rollout_id, "status": "aborted"}

    return router
