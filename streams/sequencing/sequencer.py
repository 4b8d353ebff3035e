"""Event-time sequencing of the generation queue: the windowed FIFO fed in timestamp order.

Facts — policy versions, queue entries, scored group completions — are held until the
watermark passes them, then applied in (time, kind, index) order, everything at one instant
before the FIFO is polled. The samples that come out depend only on the facts, not on the
order they were delivered in; a fact older than the watermark when it arrives is late: it is
applied at once and counted, and only then can a live run differ from a replay.

What it remembers to apply each completion once is kept for ``dedupe_horizon_s`` of event
time (``streams.sequencing.recent_keys``); a completion older than that behind the applied
time is refused, counted as ``expired_completions``, so a late copy is never applied twice.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from schemas.records import PolicyUpdated, QueueEntry, TrainSample, Trajectory
from schemas.tokens import oldest_policy
from streams.sequencing.adaptive_window import AdaptiveWindow
from streams.sequencing.recent_keys import RecentKeys
from streams.sequencing.windowed_fifo import Emitted, WindowedFifo

POLICY, QUEUED, COMPLETED = 0, 1, 2


@dataclass
class EventTimeSequencer:
    window: int | None
    item_timeout_s: float | None = None
    max_staleness: int | None = None
    consumed: frozenset[int] = frozenset()
    """Queue indices already emitted (before a restart): consumed, never emitted again."""
    drop_uniform_groups: bool = False
    """Drop a trajectory whose group's members all got the same total reward (nothing to
    learn), counted as ``dropped_no_signal`` and per domain as ``dropped_no_signal:<domain>``."""
    adaptive: AdaptiveWindow | None = None
    """Sets the window before each poll from the facts applied so far (``window`` is then its
    cap): the same facts in the same order, so a replay sets the same windows."""
    dedupe_horizon_s: float = 3600.0
    """How long, in event time, a completion is remembered as applied (and how late one may
    come before it is refused): bounds the memory of a run of any length."""
    stats: Counter[str] = field(default_factory=Counter)
    records: bool = False
    """Keep ``recorded`` for analytics; off, it stays empty: a worker without a sink would
    otherwise hold every trajectory of its run (1.7 KB a rollout)."""
    recorded: list[Trajectory] = field(default_factory=list)
    """Each rollout's first completion applied (not yet drained): the one the FIFO keeps, and
    so the one analytics record — a group scored twice (at-least-once) is in forge.trajectories
    twice, only its first scoring counts. Consumed indices are left out: recorded before."""
    _recorded_ids: RecentKeys[str] = field(init=False)
    _no_signal: RecentKeys[int] = field(init=False)
    _timed: RecentKeys[int] = field(init=False)
    _facts: list[tuple[float, int, int, int, object]] = field(default_factory=list)
    _tiebreak: itertools.count[int] = field(default_factory=itertools.count)
    _applied_until: float = float("-inf")
    _version: int = 0
    _fifo: WindowedFifo[Trajectory] = field(init=False)

    def __post_init__(self) -> None:
        self._fifo = WindowedFifo(
            self.window,
            timeout_s=self.item_timeout_s,
            max_staleness=self.max_staleness,
            consumed=self.consumed,
        )
        self._recorded_ids = RecentKeys(self.dedupe_horizon_s)
        self._no_signal = RecentKeys(self.dedupe_horizon_s)
        self._timed = RecentKeys(self.dedupe_horizon_s)

    def add_policy(self, update: PolicyUpdated) -> None:
        self._add(update.ts, POLICY, update.version, update)

    def add_queue_entry(self, index: int, entry: QueueEntry) -> None:
        self._add(entry.ts, QUEUED, index, entry)

    def add_completion(self, trajectory: Trajectory) -> None:
        when = trajectory.group_completed_ts or trajectory.ended_ts
        if when.timestamp() < self._applied_until - self.dedupe_horizon_s:
            self.stats["expired_completions"] += 1  # what applied it once is forgotten
            return
        if trajectory.queue_index < 0:
            self.stats["unqueued"] += 1
            self._record(trajectory, when.timestamp())
            return
        self._add(when, COMPLETED, trajectory.queue_index, trajectory)

    def _add(self, ts: datetime, kind: int, index: int, fact: object) -> None:
        at = ts.timestamp()
        if at < self._applied_until:
            self.stats["late_facts"] += 1
            at = self._applied_until
        heapq.heappush(self._facts, (at, kind, index, next(self._tiebreak), fact))

    def advance(self, watermark: float) -> list[TrainSample]:
        """Apply every fact strictly before ``watermark``; return the samples emitted."""
        out: list[TrainSample] = []
        while self._facts and self._facts[0][0] < watermark:
            at = self._facts[0][0]
            while self._facts and self._facts[0][0] == at:
                _, kind, index, _, fact = heapq.heappop(self._facts)
                self._apply(kind, index, fact, at)
            self._forget_before(at)
            if self.adaptive is not None:
                self._fifo.window = self.adaptive.window()
            emitted = [r for r in self._fifo.poll(at, self._version) if isinstance(r, Emitted)]
            # Each sample's head: the FIFO's after this poll, but not past a sample emitted
            # later in the same poll (forge.train has it after this one).
            head = self._fifo.head
            heads = []
            for result in reversed(emitted):
                heads.append(head)
                head = min(head, result.index)
            for result, sample_head in zip(emitted, reversed(heads), strict=True):
                traj = result.item
                out.append(
                    TrainSample(traj.rollout_id, result.index, traj, sample_head, result.staleness)
                )
            self._applied_until = at
        fifo = self._fifo.stats
        self.stats["emitted"] = fifo.emitted
        self.stats["dropped_timeout"] = fifo.dropped_timeout
        self.stats["dropped_stale"] = fifo.dropped_stale
        self.stats["dropped_no_signal"] = fifo.dropped_no_signal
        self.stats["late_completions"] = fifo.late
        self.stats["pending"] = self._fifo.pending()
        self.stats["remembered"] = len(self._recorded_ids)  # at most a horizon's
        if self.adaptive is not None:
            self.stats["window"] = self._fifo.window or 0
        return out

    def _apply(self, kind: int, index: int, fact: object, at: float) -> None:
        if kind == POLICY:
            self._version = max(self._version, index)
            if self.adaptive is not None:
                self.adaptive.policy_published(at)
        elif kind == QUEUED:
            self._fifo.enqueue(index, at)
        else:
            assert isinstance(fact, Trajectory)
            if self.adaptive is not None and self._timed.first_sight(index, at):
                self.adaptive.completed(at - fact.started_ts.timestamp())
            if index not in self.consumed:
                self._record(fact, at)
            trainable = not (self.drop_uniform_groups and fact.group_reward_spread == 0.0)
            if (
                not trainable
                and index not in self.consumed
                and self._no_signal.first_sight(index, at)
            ):
                self.stats[f"dropped_no_signal:{fact.domain}"] += 1
            self._fifo.complete(
                index, fact, oldest_policy(fact.calls, self._version), trainable=trainable
            )

    def _record(self, trajectory: Trajectory, at: float) -> None:
        if self._recorded_ids.first_sight(trajectory.rollout_id, at) and self.records:
            self.recorded.append(trajectory)

    def _forget_before(self, now: float) -> None:
        for keys in (self._recorded_ids, self._no_signal, self._timed):
            keys.forget_before(now)

    def drain_recorded(self) -> list[Trajectory]:
        out, self.recorded = self.recorded, []
        return out
