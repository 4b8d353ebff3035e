"""A complete group of assembled rollouts -> scored trajectories (pure)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime

from schemas.records import Trajectory
from streams.assembler import AssembledRollout
from streams.rewards import MemberResult, RewardConfig, score_group


def score_trajectories(
    members: Sequence[AssembledRollout], config: RewardConfig, completed_at: datetime
) -> list[Trajectory]:
    """Each call carries its step's reward r_t, reward-to-go R_t and advantage Â_t."""
    scored = score_group(
        [
            MemberResult(
                rollout_id=m.rollout_id,
                steps=m.steps,
                signals=m.signals,
                outcome=m.outcome,
                duration_s=m.duration_s,
                aborted=m.status == "aborted",
            )
            for m in members
        ],
        config,
    )
    out = []
    for member, score in zip(members, scored, strict=True):
        calls = [
            dataclasses.replace(
                call,
                reward=score.rewards[call.step],
                return_to_go=score.returns[call.step],
                advantage=score.advantages[call.step],
            )
            for call in member.calls
        ]
        out.append(
            Trajectory(
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
            )
        )
    return out
