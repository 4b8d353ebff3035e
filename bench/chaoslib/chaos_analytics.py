"""The analytics tables a chaos run's workers filled, held to a rebuild from the log (pure).

Each worker sinks into a store of its own (chDB admits one process per store), read FINAL as
the ReplacingMergeTree tables intend; the live tables are the union of those reads. The
rebuild is `forge-rl replay --sink` over the whole log (rollouts, calls) plus forge.metrics
through the sink's own insert (train_steps, which the replay does not rebuild). Equal:

- rollouts: the same rollout ids, each with the same content — every column but
  ``scoring_s`` (a measurement of the run) and ``staleness``;
- calls: the same call ids with the same content (tokens, versions, latency, ...). The replay
  writes the calls of every rollout in the log; the live worker only those of the members of a
  scored group, so calls of rollouts in no rollouts table (ended after their group's timeout,
  larger than one message, never ended) are counted apart as ``calls_unscored``, not failed;
- train_steps: the same steps (a re-published step is one row) with the same content.

Staleness is when a sample was consumed, so it is held to forge.train rather than to the
replay: a live row carries one (>= 0) exactly when its rollout is a sample of forge.train.
Against the replay the values may differ only where a fact reached the live sequencer late
(as forge.train's order may): they are counted (``staleness_differs``) and fail without late
facts. Rollouts only one side sequenced are counted too; ``forge.train = replay`` judges them.
Rollout rows come from the sequencer (its first scoring of each rollout, as the FIFO keeps
it; again with the staleness once trained; every term again for forge.train's samples), so a
group scored twice (at-least-once: forge.trajectories holds it twice) leaves one content.
A trained rollout without a staleness live is ``staleness_unrecorded``.

Within a store FINAL keeps a rollout's row with the highest staleness; across stores a row
with a staleness wins over one without (-1) the same way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from chaos_checks import Check

Row = Mapping[str, Any]
UNSET = -1
"""The staleness of a rollout no sequencer has emitted."""
NOT_COMPARED = frozenset({"scoring_s", "staleness"})
"""Rollout columns outside equality with the rebuild."""


@dataclass(frozen=True)
class Tables:
    """The analytics tables of one store (or a union), one dict per row."""

    rollouts: list[dict[str, Any]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    train_steps: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, data: Mapping[str, list[dict[str, Any]]]) -> Tables:
        return cls(data["rollouts"], data["calls"], data["train_steps"])


@dataclass(frozen=True)
class TableDiff:
    live: int
    rebuild: int
    missing: list[str] = field(default_factory=list)
    """In the rebuild, not live."""
    extra: list[str] = field(default_factory=list)
    """Live, not in the rebuild."""
    changed: list[str] = field(default_factory=list)
    """In both with other content, or live in two stores with other content."""

    @property
    def equal(self) -> bool:
        return not (self.missing or self.extra or self.changed)

    def summary(self, name: str) -> str:
        kinds = {"missing": self.missing, "extra": self.extra, "changed": self.changed}
        problems = ", ".join(f"{kind} {len(ids)}" for kind, ids in kinds.items() if ids)
        return f"{name} {self.live}/{self.rebuild}" + (f" ({problems})" if problems else "")


@dataclass(frozen=True)
class AnalyticsComparison:
    rollouts: TableDiff
    calls: TableDiff
    train_steps: TableDiff
    calls_unscored: int
    """Rebuilt calls of rollouts in no rollouts table: the replay writes them, the live
    worker does not (see the module's docstring)."""
    staleness_unrecorded: list[str]
    """Samples of forge.train whose live row has no staleness."""
    staleness_untrained: list[str]
    """Live rows with a staleness whose rollout is no sample of forge.train."""
    staleness_conflicts: list[str]
    """Rollouts with two different staleness values in the live stores."""
    staleness_differs: int
    """Sequenced on both sides with another staleness."""
    sequenced_one_side: int
    """Sequenced live or in the replay only (forge.train = replay counts these samples)."""

    def passed(self, late_facts: int) -> bool:
        return (
            self.rollouts.equal
            and self.calls.equal
            and self.train_steps.equal
            and not (
                self.staleness_unrecorded or self.staleness_untrained or self.staleness_conflicts
            )
            and (not self.staleness_differs or late_facts > 0)
        )

    def tables(self) -> dict[str, TableDiff]:
        return {"rollouts": self.rollouts, "calls": self.calls, "steps": self.train_steps}

    def check(self, late_facts: int) -> Check:
        detail = (
            "live/rebuild: "
            + "; ".join(diff.summary(name) for name, diff in self.tables().items())
            + f"; {self.calls_unscored} calls of unscored rollouts in the rebuild only"
            + f"; staleness: {len(self.staleness_unrecorded)} trained without, "
            f"{len(self.staleness_untrained)} untrained with, "
            f"{len(self.staleness_conflicts)} conflicting, {self.staleness_differs} differ "
            f"from the replay ({late_facts} facts came late), "
            f"{self.sequenced_one_side} sequenced on one side"
        )
        return Check("analytics = replay rebuild", self.passed(late_facts), detail)

    def failures(self) -> list[str]:
        lines = []
        for name, diff in self.tables().items():
            lines += [f"analytics {name}: {i} not live" for i in diff.missing[:20]]
            lines += [f"analytics {name}: {i} live, not rebuilt" for i in diff.extra[:20]]
            lines += [f"analytics {name}: {i} live with other content" for i in diff.changed[:20]]
        lines += [f"trained, no staleness live: {r}" for r in self.staleness_unrecorded[:20]]
        lines += [f"not trained, a staleness live: {r}" for r in self.staleness_untrained[:20]]
        lines += [f"two staleness values live: {r}" for r in self.staleness_conflicts[:20]]
        return lines


def _value(v: Any) -> Any:
    """Hashable and NaN equal to NaN (a NaN loss is a value the rebuild must repeat)."""
    return "nan" if isinstance(v, float) and math.isnan(v) else v


def _content(row: Row, skip: frozenset[str] = frozenset()) -> tuple[Any, ...]:
    return tuple(sorted((k, _value(v)) for k, v in row.items() if k not in skip))


def _by_id(
    rows: Iterable[Row], key: str, skip: frozenset[str] = frozenset()
) -> dict[str, set[tuple[Any, ...]]]:
    """Each id's distinct contents: one, unless two rows of it disagree."""
    out: dict[str, set[tuple[Any, ...]]] = {}
    for row in rows:
        out.setdefault(str(row[key]), set()).add(_content(row, skip))
    return out


def diff_rows(
    live: Iterable[Row], rebuild: Iterable[Row], key: str, skip: frozenset[str] = frozenset()
) -> TableDiff:
    """Rows compared by ``key``."""
    ours, theirs = _by_id(live, key, skip), _by_id(rebuild, key, skip)
    return TableDiff(
        live=len(ours),
        rebuild=len(theirs),
        missing=sorted(i for i in theirs if i not in ours),
        extra=sorted(i for i in ours if i not in theirs),
        changed=sorted(i for i in ours if i in theirs and ours[i] != theirs[i]),
    )


def live_staleness(stores: Sequence[Tables]) -> tuple[dict[str, int], list[str]]:
    """Each live rollout's staleness across stores (set wins over unset); conflicting ids."""
    seen: dict[str, set[int]] = {}
    for store in stores:
        for row in store.rollouts:
            seen.setdefault(row["rollout_id"], set()).add(int(row["staleness"]))
    conflicts = sorted(r for r, values in seen.items() if len(values - {UNSET}) > 1)
    return {r: max(values) for r, values in seen.items()}, conflicts


def compare_analytics(
    stores: Sequence[Tables], rebuild: Tables, trained: Iterable[str]
) -> AnalyticsComparison:
    """``stores``: each live worker's tables; ``trained``: forge.train's sample (rollout) ids."""
    trained_ids = set(trained)
    live_rollouts = [row for store in stores for row in store.rollouts]
    live_calls = [row for store in stores for row in store.calls]
    scored = {row["rollout_id"] for row in [*rebuild.rollouts, *live_rollouts]}
    live_call_ids = {str(row["call_id"]) for row in live_calls}
    rebuilt_call_rollout = {str(row["call_id"]): row["rollout_id"] for row in rebuild.calls}
    unscored = {
        c for c, r in rebuilt_call_rollout.items() if r not in scored and c not in live_call_ids
    }
    calls = diff_rows(
        live_calls,
        [row for row in rebuild.calls if str(row["call_id"]) not in unscored],
        "call_id",
    )
    staleness, conflicts = live_staleness(stores)
    replayed = {row["rollout_id"]: int(row["staleness"]) for row in rebuild.rollouts}
    both = [r for r, s in staleness.items() if s != UNSET and replayed.get(r, UNSET) != UNSET]
    one_side = {r for r, s in staleness.items() if s != UNSET} ^ {
        r for r, s in replayed.items() if s != UNSET
    }
    return AnalyticsComparison(
        rollouts=diff_rows(live_rollouts, rebuild.rollouts, "rollout_id", NOT_COMPARED),
        calls=calls,
        train_steps=diff_rows(
            [row for store in stores for row in store.train_steps], rebuild.train_steps, "step"
        ),
        calls_unscored=len(unscored),
        staleness_unrecorded=sorted(
            r for r in trained_ids if r in staleness and staleness[r] == UNSET
        ),
        staleness_untrained=sorted(
            r for r, s in staleness.items() if s != UNSET and r not in trained_ids
        ),
        staleness_conflicts=conflicts,
        staleness_differs=sum(1 for r in both if staleness[r] != replayed[r]),
        sequenced_one_side=len(one_side),
    )
