"""Event-time sequencing of the generation queue: the windowed FIFO fed in timestamp order.

Facts — policy versions, queue entries, scored group completions — are held until the
watermark passes them, then applied in (time, kind, index) order, everything at one instant
before the FIFO is polled. The samples that come out depend only on the facts, not on the
order they were delivered in; a fact older than the watermark when it arrives is late: it is
applied at once and counted, and only then can a live run differ from a replay.
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
    stats: Counter[str] = field(default_factory=Counter)
    recorded: list[Trajectory] = field(default_factory=list)
    """Each rollout's first completion applied (not yet drained): the one the FIFO keeps, and
    so the one analytics record — a group scored twice (at-least-once) is in forge.trajectories
    twice, only its first scoring counts. Consumed indices are left out: recorded before."""
    _recorded_ids: set[str] = field(default_factory=set)
    _no_signal: set[int] = field(default_factory=set)
    _timed: set[int] = field(default_factory=set)
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

    def add_policy(self, update: PolicyUpdated) -> None:
        self._add(update.ts, POLICY, update.version, update)

    def add_queue_entry(self, index: int, entry: QueueEntry) -> None:
        self._add(entry.ts, QUEUED, index, entry)

    def add_completion(self, trajectory: Trajectory) -> None:
        if trajectory.queue_index < 0:
            self.stats["unqueued"] += 1
            self._record(trajectory)
            return
        when = trajectory.group_completed_ts or trajectory.ended_ts
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
            if self.adaptive is not None and index not in self._timed:
                self._timed.add(index)
                self.adaptive.completed(at - fact.started_ts.timestamp())
            if index not in self.consumed:
                self._record(fact)
            trainable = not (self.drop_uniform_groups and fact.group_reward_spread == 0.0)
            if not trainable and index not in self.consumed and index not in self._no_signal:
                self._no_signal.add(index)
                self.stats[f"dropped_no_signal:{fact.domain}"] += 1
            self._fifo.complete(
                index, fact, oldest_policy(fact.calls, self._version), trainable=trainable
            )

    def _record(self, trajectory: Trajectory) -> None:
        if trajectory.rollout_id not in self._recorded_ids:
            self._recorded_ids.add(trajectory.rollout_id)
            self.recorded.append(trajectory)

    def drain_recorded(self) -> list[Trajectory]:
        out, self.recorded = self.recorded, []
        return out
