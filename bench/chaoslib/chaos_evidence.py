"""What the log says about a sample forge.train lacks: so a failed chaos run, which cannot be
rerun to order, names where its rollout went. Pure functions of the records (``chaos_log``
reads them; ``bench/chaos.py`` adds the worker log lines that name the rollout).

For each rollout a replay trained and the live run did not: its events on forge.events (which
partition, which offsets, event times), every scoring of its group the live scorer wrote to
forge.trajectories (when the watcher saw it, which members), and every dead letter that names
the rollout or its group.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from schemas.records import DeadLetter, Envelope, TrainSample, Trajectory


@dataclass(frozen=True)
class PlacedEvent:
    partition: int
    offset: int
    envelope: Envelope


@dataclass(frozen=True)
class SeenTrajectory:
    arrived: float
    """Wall time (epoch seconds) the watcher read it."""
    trajectory: Trajectory


def clock(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%H:%M:%S.%f")[:-3]


def _names(letter: DeadLetter, names: set[str]) -> bool:
    key = (letter.key or b"").decode("utf-8", "replace")
    value = letter.value or b""
    return (
        key in names
        or any(n in letter.reason for n in names)
        or any(n.encode() in value for n in names)
    )


def explain_missing(
    missing: Iterable[str],
    replay: Sequence[TrainSample],
    events: Sequence[PlacedEvent],
    scored: Sequence[SeenTrajectory],
    dead: Sequence[DeadLetter],
) -> list[str]:
    """One paragraph (a few lines) per missing sample: its rollout's trace through the log."""
    by_sample = {s.sample_id: s.trajectory for s in replay}
    lines: list[str] = []
    for sample_id in missing:
        trajectory = by_sample.get(sample_id)
        if trajectory is None:
            continue
        rid, group = trajectory.rollout_id, trajectory.group_id
        own = [e for e in events if e.envelope.rollout_id == rid]
        lines.append(f"{sample_id}: rollout {rid}, group {group}")
        if own:
            parts = sorted({e.partition for e in own})
            offsets = [e.offset for e in own]
            kinds = " ".join(e.envelope.kind.name for e in own)
            first = min(e.envelope.ts.timestamp() for e in own)
            last = max(e.envelope.ts.timestamp() for e in own)
            lines.append(
                f"  forge.events: {len(own)} events on partition {parts} offsets "
                f"{min(offsets)}-{max(offsets)}, event time {clock(first)}-{clock(last)} ({kinds})"
            )
        else:
            lines.append("  forge.events: none")
        group_scorings = [s for s in scored if s.trajectory.group_id == group]
        if not group_scorings:
            lines.append("  forge.trajectories: its group never scored live")
        for s in group_scorings:
            t = s.trajectory
            completed = clock(t.group_completed_ts.timestamp()) if t.group_completed_ts else "-"
            lines.append(
                f"  forge.trajectories: {t.rollout_id} ({t.status}, queue {t.queue_index}) seen "
                f"{clock(s.arrived)}, group completed {completed}"
            )
        letters = [d for d in dead if _names(d, {rid, group})]
        if not letters:
            lines.append("  forge.dlq: nothing names it or its group")
        for d in letters:
            lines.append(
                f"  forge.dlq: {d.reason!r} from {d.source_topic} p{d.partition}@{d.offset} "
                f"by {d.consumer} at {clock(d.ts.timestamp())}"
            )
    return lines


def missing_rollouts(missing: Iterable[str], replay: Sequence[TrainSample]) -> set[str]:
    """The rollout and group ids of the missing samples (to search worker logs for)."""
    wanted = set(missing)
    return {
        name
        for s in replay
        if s.sample_id in wanted
        for name in (s.trajectory.rollout_id, s.trajectory.group_id)
    }
