"""Rewards as pure functions of a group's finished and aborted rollouts.

For rollout i of a group, with T_i steps (one step per model call, in call order):
- process reward  r_t^perf  = w_process · Σ values of the process signals with step t (a
  signal past the last step counts at the last step): the task's own ProcessSignals, and the
  tool-outcome signals (``schemas.tool_outcomes``) at every step the task gave none for — a
  task's own signals win where both exist; plus at the last step the outcome reward
  w_outcome · outcome_i (aborted rollouts: ``aborted_outcome``; truncated ones without an
  outcome of their own: ``truncated_outcome``; no outcome given: 0);
- completion-time reward r^speed_i = w_speed · clip((d̄ - d_i) / d̄, -c, c) at the last step,
  where d_i is the rollout's duration (RolloutStarted → RolloutFinished, event time) and d̄
  the mean duration of the group's finished members: faster than the group is rewarded,
  slower penalised. Aborted and truncated rollouts (short because they were cut, not fast),
  a group with one finished member, or d̄ = 0 get 0;
- reward-to-go R_t = Σ_{p≥t} (r_p^speed + r_p^perf);
- advantage Â_t = R_t - B, with B the mean of R_0 over all group members.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from schemas.pipeline_file import RewardConfig


@dataclass(frozen=True)
class MemberResult:
    rollout_id: str
    steps: int
    signals: tuple[tuple[int, float], ...]
    """(step, value) of every ProcessSignal."""
    outcome: float | None
    duration_s: float
    aborted: bool
    truncated: bool = False


@dataclass(frozen=True)
class ScoredRollout:
    rollout_id: str
    rewards: tuple[float, ...]
    """r_t = r_t^speed + r_t^perf per step."""
    returns: tuple[float, ...]
    """R_t per step."""
    advantages: tuple[float, ...]
    total: float
    """R_0, or the outcome and speed rewards alone for a rollout without steps."""
    speed_reward: float


def process_rewards(steps: int, signals: Sequence[tuple[int, float]], weight: float) -> list[float]:
    rewards = [0.0] * steps
    for step, value in signals:
        if steps:
            rewards[min(step, steps - 1)] += weight * value
    return rewards


def completion_time_reward(
    duration_s: float, finished_durations: Sequence[float], weight: float, clip: float
) -> float:
    if len(finished_durations) < 2:
        return 0.0
    mean = sum(finished_durations) / len(finished_durations)
    if mean <= 0:
        return 0.0
    return weight * max(-clip, min(clip, (mean - duration_s) / mean))


def rewards_to_go(rewards: Sequence[float]) -> list[float]:
    out, running = [0.0] * len(rewards), 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running += rewards[t]
        out[t] = running
    return out


def score_group(members: Sequence[MemberResult], config: RewardConfig) -> list[ScoredRollout]:
    finished = [m.duration_s for m in members if not (m.aborted or m.truncated)]
    partial = []
    for m in members:
        rewards = process_rewards(m.steps, m.signals, config.process_weight)
        if m.aborted:
            outcome = config.aborted_outcome
        elif m.truncated and m.outcome is None:
            outcome = config.truncated_outcome
        else:
            outcome = m.outcome or 0.0
        speed = (
            0.0
            if m.aborted or m.truncated
            else completion_time_reward(
                m.duration_s, finished, config.speed_weight, config.speed_clip
            )
        )
        terminal = config.outcome_weight * outcome + speed
        if rewards:
            rewards[-1] += terminal
        returns = rewards_to_go(rewards)
        total = returns[0] if returns else terminal
        partial.append((m, rewards, returns, total, speed))
    baseline = sum(p[3] for p in partial) / len(partial) if partial else 0.0
    return [
        ScoredRollout(
            rollout_id=m.rollout_id,
            rewards=tuple(rewards),
            returns=tuple(returns),
            advantages=tuple(r - baseline for r in returns),
            total=total,
            speed_reward=speed,
        )
        for m, rewards, returns, total, speed in partial
    ]
