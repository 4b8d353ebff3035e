"""The whole processing of a stretch of the log as one deterministic function (pure).

events -> per-rollout assembly (dedup by event_id) -> groups complete (all members ended, or
the group timeout passed in event time) -> rewards (rollouts larger than one message or with a
non-finite reward input left out and counted) -> windowed FIFO over the queue indices,
driven by event time: facts (policy versions, queue entries, group completions) are applied
in timestamp order, so the output depends only on the log's content, never on how it was
delivered (a trajectory's ``scoring_s`` aside: this run's measurement, outside equality).
Replays run exactly this.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from schemas.records import Envelope, PolicyUpdated, QueueEntry, TrainSample, Trajectory
from streams.pipeline_config import PipelineConfig
from streams.stage.assembler import AssembledRollout, RolloutAssembly
from streams.stage.groups import settle_group
from streams.stage.rollout_letters import oversize_events
from streams.stage.scoring import score_trajectories


@dataclass
class PipelineResult:
    samples: list[TrainSample]
    trajectories: list[Trajectory]
    stats: Counter[str]
    staleness: dict[str, int] = field(default_factory=dict)
    """Policy versions between a sample's oldest call and its emission, by rollout id."""


def _complete_groups(
    rollouts: list[AssembledRollout],
    horizon: datetime,
    config: PipelineConfig,
    stats: Counter[str],
) -> list[tuple[datetime, list[AssembledRollout]]]:
    groups: dict[str, list[AssembledRollout]] = {}
    for r in rollouts:
        groups.setdefault(r.group_id, []).append(r)
    done = []
    for members in groups.values():
        settled = settle_group(members, horizon, config.group_timeout(members[0].domain))
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
        if not assembly.complete:
            stats["rollouts_incomplete"] += 1
        elif oversize_events(assembly.rollout_id, assembly.events) is not None:
            stats["rollouts_oversize"] += 1  # the live worker dead-letters it
        else:
            rollouts.append(assembly.assemble())
    if horizon is None:
        return PipelineResult([], [], stats)
    groups = _complete_groups(rollouts, horizon, config, stats)
    trajectories: list[Trajectory] = []
    sequencer = config.sequencer()
    for completed_at, members in groups:
        scored = score_trajectories(members, config, completed_at)
        stats["rollouts_rejected"] += len(scored.rejected)  # the live worker dead-letters them
        for traj in scored.trajectories:
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
    staleness = {sample.sample_id: sample.staleness for sample in samples}
    return PipelineResult(samples, trajectories, stats, staleness)
