"""The rollout lifecycle endpoints: start, process signals, finish, abort. Their bodies are
validated by ``protocol``; the rollout service does the work."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from gateway.api.deps import GatewayDep, RolloutRequestDep, require_admin
from gateway.api.protocol import AbortIn, FinishIn, RolloutCreate, SignalsIn
from schemas.records import TRUNCATED, ProcessSignal, RolloutAborted, RolloutFinished

router = APIRouter(prefix="/rollouts")


@router.post("", dependencies=[Depends(require_admin)])
async def create_rollout(body: RolloutCreate, gateway: GatewayDep) -> dict[str, Any]:
    rollout, api_key = await gateway.service.start(
        body.task_id, body.group_id, body.group_size, body.metadata, body.domain
    )
    return {
        "rollout_id": rollout.rollout_id,
        "group_id": rollout.group_id,
        "group_size": rollout.group_size,
        "domain": rollout.domain,
        "api_key": api_key,
        "base_url": f"{gateway.settings.public_url}/rollouts/{rollout.rollout_id}/v1",
        # Anthropic's clients add /v1/messages themselves
        "anthropic_base_url": f"{gateway.settings.public_url}/rollouts/{rollout.rollout_id}",
    }


@router.get("/next-domain", dependencies=[Depends(require_admin)])
async def next_domain(gateway: GatewayDep) -> dict[str, Any]:
    """The domain whose next group the mix wants (``gateway.call.domain_mix``), and where every
    domain stands: a fleet asks before it starts a group."""
    return gateway.service.next_domain()


@router.post("/{rollout_id}/signals")
async def signals(body: SignalsIn, on: RolloutRequestDep) -> dict[str, Any]:
    items = body if isinstance(body, list) else [body]
    await on.gateway.service.signal(
        on.rollout, [ProcessSignal(s.step, s.name, s.value) for s in items]
    )
    return {"accepted": len(items)}


@router.post("/{rollout_id}/finish")
async def finish(body: FinishIn, on: RolloutRequestDep) -> dict[str, Any]:
    event = RolloutFinished(body.status, body.outcome_reward, body.reason)
    status = TRUNCATED if body.status == TRUNCATED else "finished"
    signals = [ProcessSignal(s.step, s.name, s.value) for s in body.signals]
    await on.gateway.service.close(on.rollout, event, status, body.reason, signals)
    return {"rollout_id": on.rollout.rollout_id, "status": status}


@router.post("/{rollout_id}/abort")
async def abort(body: AbortIn, on: RolloutRequestDep) -> dict[str, Any]:
    """The agent failed (crashed, gave no answer): the group scores it as aborted."""
    await on.gateway.service.close(on.rollout, RolloutAborted(reason=body.reason), "aborted")
    return {"rollout_id": on.rollout.rollout_id, "status": "aborted"}
