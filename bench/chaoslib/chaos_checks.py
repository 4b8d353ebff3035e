"""The invariants a chaos run is held to: pure functions of what the log holds and what the
agents were told (no Kafka, no HTTP here; ``bench/chaos.py`` reads and calls them).

- Nothing acknowledged is lost: every rollout whose finish was answered 200 has its
  RolloutFinished in forge.events.
- forge.train is the replay of forge.events: the same samples, each once, with the same
  content; the order may differ only where a queue entry or policy update reached the live
  sequencer late (docs/streams.md, "Sequencing"; a trajectory waits for its partition's claim), so
  reordered samples are counted beside the late facts that allow them.
- Every sample of forge.train is trained once, in order: TrainSteps (deduplicated by step, as
  the trainer re-publishes its last records on resume) list forge.train's samples as a prefix
  of the topic, none twice, none left out (dead-lettered ones excepted), the untrained tail
  shorter than one batch.
- forge.policy's versions never go back (a re-published record is the same record).
"""

from __future__ import annotations

import bisect
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from schemas.records import PolicyUpdated, TrainSample, TrainStep


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str


def lost_rollouts(acknowledged: Iterable[str], finished_in_log: set[str]) -> list[str]:
    """Rollouts whose finish an agent saw answered 200 but whose RolloutFinished is absent."""
    return sorted(r for r in acknowledged if r not in finished_in_log)


def reordered(live_ids: Sequence[str], replay_ids: Sequence[str]) -> int:
    """Samples out of place: the common samples minus the longest run that keeps the replay's
    order (a longest increasing subsequence of their replay positions)."""
    position = {sid: i for i, sid in enumerate(replay_ids)}
    tails: list[int] = []
    common = 0
    for sid in live_ids:
        if sid not in position:
            continue
        common += 1
        at = bisect.bisect_left(tails, position[sid])
        if at == len(tails):
            tails.append(position[sid])
        else:
            tails[at] = position[sid]
    return common - len(tails)


@dataclass(frozen=True)
class TrainComparison:
    live: int
    replay: int
    missing: list[str]
    """In the replay, not in forge.train."""
    extra: list[str]
    """In forge.train, not in the replay."""
    duplicated: list[str]
    """In forge.train more than once."""
    changed: list[str]
    """In both, with different content (rewards, queue index, calls)."""
    reordered: int

    @property
    def same_samples(self) -> bool:
        return not (self.missing or self.extra or self.duplicated or self.changed)


def compare_train(live: Sequence[TrainSample], replay: Sequence[TrainSample]) -> TrainComparison:
    live_ids = [s.sample_id for s in live]
    replay_ids = [s.sample_id for s in replay]
    counts = Counter(live_ids)
    by_id = {s.sample_id: s for s in replay}
    first_live: dict[str, TrainSample] = {}
    for s in live:
        first_live.setdefault(s.sample_id, s)
    return TrainComparison(
        live=len(live),
        replay=len(replay),
        missing=[sid for sid in replay_ids if sid not in counts],
        extra=[sid for sid in first_live if sid not in by_id],
        duplicated=sorted(sid for sid, n in counts.items() if n > 1),
        changed=[sid for sid, s in first_live.items() if sid in by_id and s != by_id[sid]],
        reordered=reordered(list(first_live), replay_ids),
    )


@dataclass(frozen=True)
class TrainingAccount:
    steps: int
    trained: int
    trained_twice: list[str]
    skipped: list[str]
    """Before the last trained sample in forge.train, never trained, not dead-lettered."""
    out_of_order: bool
    """The trained sequence is not forge.train's order."""
    step_conflicts: list[int]
    """Step numbers published twice with different samples."""
    step_gaps: list[int]
    """Step numbers missing between 1 and the last."""
    untrained: int
    """Samples after the last trained one (at most a partial batch once drained)."""
    dead_lettered: int


def account_training(
    steps: Iterable[TrainStep], train_ids: Sequence[str], dead_offsets: set[int]
) -> TrainingAccount:
    """``steps`` in log order (re-published ones included); ``dead_offsets``: forge.train
    offsets the trainer sent to forge.dlq instead of training them."""
    by_step: dict[int, TrainStep] = {}
    conflicts = set()
    for step in steps:
        seen = by_step.setdefault(step.step, step)
        if seen.sample_ids != step.sample_ids:
            conflicts.add(step.step)
    ordered = [by_step[n] for n in sorted(by_step)]
    last = ordered[-1].step if ordered else 0
    gaps = [n for n in range(1, last + 1) if n not in by_step]
    trained = [sid for step in ordered for sid in step.sample_ids]
    counts = Counter(trained)
    expected = [sid for i, sid in enumerate(train_ids) if i not in dead_offsets]
    done = set(trained)
    last_at = max((i for i, sid in enumerate(expected) if sid in done), default=-1)
    return TrainingAccount(
        steps=len(ordered),
        trained=len(trained),
        trained_twice=sorted(sid for sid, n in counts.items() if n > 1),
        skipped=[sid for sid in expected[: last_at + 1] if sid not in done],
        out_of_order=trained != expected[: len(trained)],
        step_conflicts=sorted(conflicts),
        step_gaps=gaps,
        untrained=len(expected) - (last_at + 1),
        dead_lettered=len(dead_offsets),
    )


def policy_regressions(updates: Iterable[PolicyUpdated]) -> list[str]:
    """Each record whose version is below the newest before it, or equal to it without being
    the same record re-published (same step and weights)."""
    problems = []
    newest: PolicyUpdated | None = None
    for update in updates:
        if newest is not None and (
            update.version < newest.version
            or (
                update.version == newest.version
                and (update.step, update.checkpoint_uri) != (newest.step, newest.checkpoint_uri)
            )
        ):
            problems.append(f"v{update.version} (step {update.step}) after v{newest.version}")
        if newest is None or update.version > newest.version:
            newest = update
    return problems


def late_facts(facts: Iterable[tuple[float, float]], lateness_s: float) -> int:
    """(seen in the log, event time) pairs in seconds: those seen more than ``lateness_s``
    after their event time — an upper estimate of the sequencer's late facts."""
    return sum(1 for seen, at in facts if seen - at > lateness_s)


@dataclass
class Recovery:
    """Seconds from each fault until the pipeline made progress again (None: it did not)."""

    times: list[float | None] = field(default_factory=list)

    def percentile_50(self) -> float | None:
        done = [t for t in self.times if t is not None]
        return statistics.median(done) if done else None

    def maximum(self) -> float | None:
        done = [t for t in self.times if t is not None]
        return max(done) if done else None

    @property
    def unrecovered(self) -> int:
        return sum(1 for t in self.times if t is None)
