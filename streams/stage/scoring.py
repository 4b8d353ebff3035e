"""A complete group of assembled rollouts -> scored trajectories (pure).

The live worker and the replay score through here, so they reject the same rollouts: one
whose outcome or a signal value is not finite (an older log, another producer) is left out
before scoring — inside the group it would make every member's advantage non-finite through
the baseline —, and one whose trajectory does not fit one message after it (it counted in the
baseline). The worker dead-letters rejected rollouts with the reason; a replay counts them.
Each scored trajectory carries the group's scoring time, measured here for both: the cost
ledger's credit-assignment cost (a replay's is its own).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from schemas import codec
from schemas.pipeline_file import DEFAULT_DOMAIN, ToolRewards
from schemas.records import TRUNCATED, Trajectory
from schemas.tool_outcomes import merge_signals, tool_signals
from streams.stage.assembler import AssembledRollout
from streams.stage.message_size import MESSAGE_LIMIT, size_bound, too_large
from streams.stage.rewards import MemberResult, score_group

if TYPE_CHECKING:  # the pipeline scores through here
    from streams.pipeline_config import PipelineConfig


@dataclass(frozen=True)
class Rejected:
    rollout: AssembledRollout
    reason: str


@dataclass(frozen=True)
class ScoredGroup:
    trajectories: list[Trajectory]
    """The scored members, in the order given."""
    rejected: list[Rejected]


def unscorable(member: AssembledRollout) -> str | None:
    """Why ``member`` cannot be scored, or None."""
    if member.outcome is not None and not math.isfinite(member.outcome):
        return f"rollout {member.rollout_id}: outcome reward {member.outcome} is not finite"
    for step, value in member.signals:
        if not math.isfinite(value):
            return (
                f"rollout {member.rollout_id}: process signal {value} at step {step} is not finite"
            )
    return None


def oversize_trajectory(trajectory: Trajectory) -> str | None:
    """Why ``trajectory`` cannot be sent (n > 1 choices repeat their prompt in it), or None."""
    if size_bound(trajectory) <= MESSAGE_LIMIT:
        return None
    reason = too_large(
        f"rollout {trajectory.rollout_id}'s trajectory", len(codec.encode(trajectory))
    )
    return None if reason is None else f"{reason}: not sent"


def group_domain(members: Sequence[AssembledRollout]) -> str:
    """A group's domain. Its members share one; in a log where they do not, the least name,
    whatever order they were read in."""
    return min((m.domain for m in members), default=DEFAULT_DOMAIN)


def member_result(member: AssembledRollout, tools: ToolRewards) -> MemberResult:
    derived = [(s.step, s.value) for s in tool_signals(member.tools, tools)]
    return MemberResult(
        rollout_id=member.rollout_id,
        steps=member.steps,
        signals=merge_signals(member.signals, derived),
        outcome=member.outcome,
        duration_s=member.duration_s,
        aborted=member.status == "aborted",
        truncated=member.status == TRUNCATED,
    )


def score_trajectories(
    members: Sequence[AssembledRollout],
    config: PipelineConfig,
    completed_at: datetime,
    clock: Callable[[], float] = time.perf_counter,
) -> ScoredGroup:
    """Each call carries its step's reward r_t, reward-to-go R_t and advantage Â_t, under the
    rules of the group's domain; each trajectory the ``clock`` seconds this took for the whole
    group (checks, rewards, advantages, message sizes) as ``scoring_s``, and the spread of the
    group's total rewards (0: nothing to learn from the group)."""
    started = clock()
    domain = config.domain(group_domain(members))
    verdicts = [(m, unscorable(m)) for m in members]
    rejected = [Rejected(m, reason) for m, reason in verdicts if reason is not None]
    valid = [m for m, reason in verdicts if reason is None]
    scored = score_group([member_result(m, domain.tool_rewards) for m in valid], domain.rewards)
    totals = [score.total for score in scored]
    spread = max(totals) - min(totals) if totals else 0.0
    out = []
    for member, score in zip(valid, scored, strict=True):
        calls = [
            dataclasses.replace(
                call,
                reward=score.rewards[call.step],
                return_to_go=score.returns[call.step],
                advantage=score.advantages[call.step],
            )
            for call in member.calls
        ]
        trajectory = Trajectory(
            rollout_id=member.rollout_id,
            group_id=member.group_id,
            task_id=member.task_id,
            queue_index=member.queue_index,
            status=member.status,
            started_ts=member.started_ts,
            ended_ts=member.ended_ts,
            calls=calls,
            outcome_reward=member.outcome,
            total_reward=score.total,
            group_completed_ts=completed_at,
            domain=member.domain,
            group_reward_spread=spread,
        )
        reason = oversize_trajectory(trajectory)
        if reason is None:
            out.append(trajectory)
        else:
            rejected.append(Rejected(member, reason))
    scoring_s = clock() - started
    return ScoredGroup([dataclasses.replace(t, scoring_s=scoring_s) for t in out], rejected)
