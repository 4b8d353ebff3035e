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
from streams.windowed_fifo import Emitted, WindowedFifo


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


def _complete_groups(
    rollouts: list[AssembledRollout], horizon: datetime, timeout: timedelta, stats: Counter[str]
) -> list[tuple[datetime, list[AssembledRollout]]]:
    groups: dict[str, list[AssembledRollout]] = {}
    for r in rollouts:
        groups.setdefault(r.group_id, []).append(r)
    done = []
    for members in groups.values():
        members.sort(key=lambda r: (r.queue_index, r.rollout_id))
        size = members[0].group_size
        deadline = min(m.started_ts for m in members) + timeout
        if len(members) >= size:
            done.append((max(m.ended_ts for m in members), members[:size]))
        elif horizon >= deadline:
            present = [m for m in members if m.ended_ts <= deadline]
            stats["group_timeouts"] += 1
            stats["late_members"] += len(members) - len(present)
            if present:
                done.append((deadline, present))
        else:
            stats["groups_open"] += 1
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
    facts: list[tuple[datetime, int, int, object]] = []
    for completed_at, members in groups:
        for traj in score_trajectories(members, config.rewards):
            trajectories.append(traj)
            if traj.queue_index < 0:
                stats["unqueued"] += 1
                continue
            facts.append((completed_at, 2, traj.queue_index, traj))
    # Facts after the log's last event are outside this stretch of the log.
    facts.extend((e.ts, 1, index, e) for index, e in queue if e.ts <= horizon)
    facts.extend((p.ts, 0, p.version, p) for p in policies if p.ts <= horizon)
    facts.sort(key=lambda f: (f[0], f[1], f[2]))

    fifo: WindowedFifo[Trajectory] = WindowedFifo(
        config.window, timeout_s=config.item_timeout_s, max_staleness=config.max_staleness
    )
    version = 0
    samples = []
    staleness: dict[str, int] = {}
    for n, (ts, kind, index, fact) in enumerate(facts):
        if kind == 0:
            version = max(version, index)
        elif kind == 1:
            fifo.enqueue(index, ts.timestamp())
        else:
            assert isinstance(fact, Trajectory)
            oldest = min((c.policy_version for c in fact.calls), default=version)
            fifo.complete(index, fact, oldest)
        if n + 1 < len(facts) and facts[n + 1][0] == ts:
            continue  # everything that happened at one instant is applied before polling
        for out in fifo.poll(ts.timestamp(), version):
            if isinstance(out, Emitted):
                traj = out.item
                samples.append(TrainSample(traj.rollout_id, out.index, traj))
                staleness[traj.rollout_id] = out.staleness
    stats.update(
        emitted=fifo.stats.emitted,
        dropped_timeout=fifo.stats.dropped_timeout,
        dropped_stale=fifo.stats.dropped_stale,
        late_completions=fifo.stats.late,
        pending=fifo.pending(),
    )
    return PipelineResult(samples, trajectories, stats, staleness)
