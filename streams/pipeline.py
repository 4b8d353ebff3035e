"""The whole processing of a stretch of the log as one deterministic function (pure).

events -> per-rollout assembly (dedup by event_id) -> groups complete (all members ended, or
the group timeout passed in event time) -> rewards -> windowed FIFO over the queue indices,
driven by event time: facts (policy versions, queue entries, group completions) are applied
in timestamp order, so the output depends only on the log's content, never on how it was
delivered. Replays run exactly this.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from schemas.records import Envelope, PolicyUpdated, QueueEntry, TrainSample, Trajectory
from streams.assembler import AssembledRollout, RolloutAssembly
from streams.rewards import RewardConfig
from streams.scoring import score_trajectories
from streams.sequencer import EventTimeSequencer


@dataclass(frozen=True)
class PipelineConfig:
    rewards: RewardConfig = field(default_factory=RewardConfig)
    window: int | None = 64
    item_timeout_s: float | None = 900.0
    group_timeout_s: float = 900.0
    max_staleness: int | None = None


@dataclass
class PipelineResult:
    samples: list[TrainSample]
    trajectories: list[Trajectory]
    stats: Counter[str]
    staleness: dict[str, int] = field(default_factory=dict)
    """Policy versions between a sample's oldest call and its emission, by rollout id."""


@dataclass(frozen=True)
class SettledGroup:
    completed_at: datetime
    members: list[AssembledRollout]
    """Scored together, in queue order."""
    late: list[AssembledRollout]
    """Ended after the group's timeout: left out of the scoring."""
    timed_out: bool


def settle_group(
    members: list[AssembledRollout], horizon: datetime, timeout: timedelta
) -> SettledGroup | None:
    """A group is complete when all its members ended, or once event time (``horizon``: the
    newest event seen) passes its first start + ``timeout``: then the members that ended by
    that deadline are scored. None while it is still open. Replay and live worker share it."""
    members = sorted(members, key=lambda r: (r.queue_index, r.rollout_id))
    size = members[0].group_size
    if len(members) >= size:
        return SettledGroup(max(m.ended_ts for m in members[:size]), members[:size], [], False)
    deadline = min(m.started_ts for m in members) + timeout
    if horizon < deadline:
        return None
    present = [m for m in members if m.ended_ts <= deadline]
    late = [m for m in members if m.ended_ts > deadline]
    return SettledGroup(deadline, present, late, True)


def _complete_groups(
    rollouts: list[AssembledRollout], horizon: datetime, timeout: timedelta, stats: Counter[str]
) -> list[tuple[datetime, list[AssembledRollout]]]:
    groups: dict[str, list[AssembledRollout]] = {}
    for r in rollouts:
        groups.setdefault(r.group_id, []).append(r)
    done = []
    for members in groups.values():
        settled = settle_group(members, horizon, timeout)
        if settled is None:
            stats["groups_open"] += 1
            continue
        if settled.timed_out:
            stats["group_timeouts"] += 1
            stats["late_members"] += len(settled.late)
        if settled.members:
            done.append((settled.completed_at, settled.members))
    return done


def process_log(
    events: Iterable[Envelope],
    queue: Iterable[tuple[int, QueueEntry]],
    policies: Iterable[PolicyUpdated],
    config: PipelineConfig,
) -> PipelineResult:
    stats: Counter[str] = Counter()
    assemblies: dict[str, RolloutAssembly] = {}
    horizon: datetime | None = None
    for env in events:
        horizon = env.ts if horizon is None else max(horizon, env.ts)
        assembly = assemblies.setdefault(env.rollout_id, RolloutAssembly(env.rollout_id))
        if not assembly.add(env):
            stats["duplicate_events"] += 1
    rollouts = []
    for assembly in assemblies.values():
        if assembly.complete:
            rollouts.append(assembly.assemble())
        else:
            stats["rollouts_incomplete"] += 1
    if horizon is None:
        return PipelineResult([], [], stats)
    groups = _complete_groups(rollouts, horizon, timedelta(seconds=config.group_timeout_s), stats)
    trajectories: list[Trajectory] = []
    sequencer = EventTimeSequencer(config.window, config.item_timeout_s, config.max_staleness)
    for completed_at, members in groups:
        for traj in score_trajectories(members, config.rewards, completed_at):
            trajectories.append(traj)
            sequencer.add_completion(traj)
    # Facts after the log's last event are outside this stretch of the log.
    for index, entry in queue:
        if entry.ts <= horizon:
            sequencer.add_queue_entry(index, entry)
    for update in policies:
        if update.ts <= horizon:
            sequencer.add_policy(update)
    samples = sequencer.advance(float("inf"))
    stats.update(sequencer.stats)
    staleness = sequencer.staleness
    return PipelineResult(samples, trajectories, stats, staleness)
