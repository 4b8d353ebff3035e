"""What the picture report reads: its SQL over the analytics tables, limited to a run's span.

The tables have no run column: a run is the wall-clock span it ran in. ``forge-rl run`` writes
``started_at`` and ``ended_at`` (ISO, UTC) into ``$FORGE_HOME/runs/<id>/summary.json``;
``run_span`` reads them back. A summary from before those fields: the start comes from the run
id (``run-YYYYmmdd-HHMMSS``, UTC), the end is when summary.json was written. A run without a
summary (still running, or crashed): from its id's start, open-ended. Rows of another run that
overlapped in time (two runs on one store at once) cannot be told apart.

Rows are filtered on event time: ``rollouts.ended_at`` and ``train_steps.ts``; the cost ledger
(``streams.analytics.reports.costs_over_time``, each event in the bucket of its own time) keeps the
buckets that start in the span.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from schemas.errors import ForgeError

REWARD_WINDOW = 50
"""Rollouts in the moving mean the reward pictures draw (fewer at the start of the span)."""
MAX_POINTS = 20_000
"""Rollouts drawn at most per picture: a longer span is thinned evenly after the moving
mean is taken over every rollout."""

BUCKET_S = 10
"""Throughput is counted per this many seconds in SQL, then merged into wider bins to plot."""

PHASES = ("wait_data_s", "tree_build_s", "forward_backward_s", "optimizer_s", "export_s",
          "checkpoint_s")  # fmt: skip
"""TrainStep's time split (``trainer.timing``), in the order the phases run."""

STEP_COLUMNS = (
    "step", "policy_version", "loss", "samples", "kl_mean", "kl_max", "ratio_mean",
    "ratio_std", "ratio_max", "clip_fraction", "newest_version_token_share",
    "staleness_mean", "staleness_max", "step_time_s", *PHASES,
)  # fmt: skip


class RunNotFoundError(ForgeError):
    """``--run`` names no directory under $FORGE_HOME/runs."""


@dataclass(frozen=True)
class Span:
    """A half-open wall-clock interval [start, end); None: unbounded on that side."""

    start: datetime | None = None
    end: datetime | None = None
    label: str = "all data"

    def where(self, column: str) -> str:
        """``WHERE ...`` restricting ``column`` to the span ('' when unbounded)."""
        terms = []
        if self.start is not None:
            terms.append(f"{column} >= {_literal(self.start)}")
        if self.end is not None:
            terms.append(f"{column} < {_literal(self.end)}")
        return f"WHERE {' AND '.join(terms)}" if terms else ""


def _literal(moment: datetime) -> str:
    """A DateTime64 literal built from a datetime (never from user text)."""
    utc = moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    return f"toDateTime64('{utc.strftime('%Y-%m-%d %H:%M:%S.%f')}', 6, 'UTC')"


def _utc(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def run_started(run_id: str) -> datetime | None:
    """The start time a run id (``run-YYYYmmdd-HHMMSS``, UTC) encodes, if it is one."""
    try:
        return datetime.strptime(run_id, "run-%Y%m%d-%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        return None


def run_span(runs_dir: Path, run_id: str) -> Span:
    """The span of run ``run_id`` (see the module docstring for the fallbacks)."""
    run_dir = runs_dir / run_id
    if "/" in run_id or not run_dir.is_dir():
        raise RunNotFoundError(f"no run {run_id!r} under {runs_dir}")
    summary_path = run_dir / "summary.json"
    summary: dict[str, Any] = {}
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
    start = _utc(summary["started_at"]) if summary.get("started_at") else run_started(run_id)
    end: datetime | None = None
    if summary.get("ended_at"):
        end = _utc(summary["ended_at"])
    elif summary_path.exists():
        end = datetime.fromtimestamp(summary_path.stat().st_mtime, UTC)
    return Span(start, end, run_id)


def cost_bucket_s(span: Span) -> int:
    """The cost ledger's bucket: about 60 over a closed span (10 s to 1 h, whole 10 s), else
    a minute."""
    if span.start is None or span.end is None:
        return 60
    seconds = (span.end - span.start).total_seconds() / 60
    return int(min(3600, max(10, round(seconds / 10) * 10)))


def report_queries(span: Span) -> dict[str, tuple[str, str]]:
    """name -> (title, sql) of every query the pictures need."""
    from streams.analytics.reports import (
        costs_over_time,  # the cost ledger, as `analytics costs` has it
    )

    bucket_s = cost_bucket_s(span)
    title, ledger = costs_over_time(bucket_s)
    rollouts = span.where("ended_at")
    steps = span.where("ts")
    return {
        "rewards": (
            f"Reward, solved and aborted share: moving means over {REWARD_WINDOW} rollouts",
            moving_rewards_sql(rollouts, by_domain=False),
        ),
        "domain_rewards": (
            f"Reward by domain: moving means over {REWARD_WINDOW} rollouts",
            moving_rewards_sql(rollouts, by_domain=True),
        ),
        "domain_trained": (
            "Trained samples by domain",
            f"""SELECT domain, countIf(staleness >= 0) AS trained FROM rollouts FINAL {rollouts}
                GROUP BY domain ORDER BY domain""",
        ),
        "staleness": (
            "Rollouts by staleness at consumption",
            f"""SELECT staleness, count() AS rollouts FROM rollouts FINAL {rollouts}
                GROUP BY staleness ORDER BY staleness""",
        ),
        "steps": (
            "Training steps",
            f"""SELECT {", ".join(STEP_COLUMNS)} FROM train_steps FINAL {steps}
                ORDER BY step""",
        ),
        "costs": (
            title,
            f"""SELECT toUnixTimestamp(bucket) AS t, engine_s, agent_s, credit_s, update_s,
                       cost_s, {bucket_s:d} AS bucket_s
                FROM ({ledger}) {span.where("bucket")} ORDER BY t""",
        ),
        "rollout_rate": (
            f"Rollouts per {BUCKET_S} s",
            f"""SELECT intDiv(toUnixTimestamp(ended_at), {BUCKET_S}) * {BUCKET_S} AS t,
                       count() AS n
                FROM rollouts FINAL {rollouts} GROUP BY t ORDER BY t""",
        ),
        "sample_rate": (
            f"Trained samples per {BUCKET_S} s",
            f"""SELECT intDiv(toUnixTimestamp(ts), {BUCKET_S}) * {BUCKET_S} AS t,
                       sum(samples) AS n
                FROM train_steps FINAL {steps} GROUP BY t ORDER BY t""",
        ),
    }


def moving_rewards_sql(where: str, *, by_domain: bool) -> str:
    """Each rollout in ``where`` (or every ``MAX_POINTS``-th of a longer span), ordered by the
    policy version that generated it, then by its end: ``x`` is its version plus its place
    among that version's rollouts (a fraction), beside its own reward and the trailing means
    over ``REWARD_WINDOW`` rollouts (of its domain, ``by_domain``) of the reward, the solved
    share (outcome reward > 0, among rollouts with an outcome) and the aborted share."""
    part = "PARTITION BY domain " if by_domain else ""
    order = "ORDER BY policy_version, ended_at, rollout_id"
    trailing = f"({part}{order} ROWS BETWEEN {REWARD_WINDOW - 1} PRECEDING AND CURRENT ROW)"
    return f"""SELECT domain, x, total_reward, mean_reward, solved_share, aborted_share FROM (
        SELECT domain, total_reward,
               policy_version + (row_number() OVER (PARTITION BY policy_version {order}) - 1)
                 / count() OVER (PARTITION BY policy_version) AS x,
               row_number() OVER ({part}{order}) AS n,
               count() OVER ({part.rstrip()}) AS rollouts,
               avg(total_reward) OVER {trailing} AS mean_reward,
               sumIf(1, outcome_reward > 0) OVER {trailing}
                 / greatest(sumIf(1, outcome_reward IS NOT NULL) OVER {trailing}, 1)
                 AS solved_share,
               avg(status = 'aborted') OVER {trailing} AS aborted_share
        FROM rollouts FINAL {where})
    WHERE n % greatest(intDiv(rollouts, {MAX_POINTS}), 1) = 0 OR n = rollouts
    ORDER BY {"domain, " if by_domain else ""}x"""


@dataclass(frozen=True)
class Frame:
    """One query's answer, by column."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]

    def __len__(self) -> int:
        return len(self.rows)

    def by(self, name: str) -> dict[str, Frame]:
        """The rows split by the text of column ``name``, in order of first appearance."""
        i = self.columns.index(name)
        parts: dict[str, list[tuple[Any, ...]]] = {}
        for row in self.rows:
            parts.setdefault(str(row[i]), []).append(row)
        return {key: Frame(self.columns, tuple(rows)) for key, rows in parts.items()}

    def col(self, name: str) -> list[float]:
        """A column as floats; NULL -> nan. The worker's endpoint sends every value as text
        (a NULL as 'None')."""
        i = self.columns.index(name)
        return [float("nan") if r[i] in (None, "None") else float(r[i]) for r in self.rows]


def frames(
    answers: Mapping[str, tuple[Sequence[str], Sequence[Sequence[Any]]]],
) -> dict[str, Frame]:
    return {
        name: Frame(tuple(columns), tuple(tuple(r) for r in rows))
        for name, (columns, rows) in answers.items()
    }


def per_minute(times: Sequence[float], counts: Sequence[float], points: int = 120) -> tuple[
    list[float], list[float]
]:  # fmt: skip
    """A rate per minute from counts per ``BUCKET_S`` bucket (bucket start times, unix s).

    Returns (minutes since the first bucket, rate) at the end of about ``points`` evenly
    spaced bins. Each rate is over the trailing minute, or the trailing 1/30 of the span if
    longer, so a trainer stepping every 20 s does not alias into spikes; near the start it is
    over the time elapsed so far. Empty buckets count as zero.
    """
    if not times:
        return [], []
    first = min(times)
    dense = [0.0] * (int((max(times) - first) // BUCKET_S) + 1)
    for t, n in zip(times, counts, strict=True):
        dense[int((t - first) // BUCKET_S)] += n
    span = len(dense)
    window = max(-(-60 // BUCKET_S), span // 30)  # in buckets
    stride = max(1, -(-span // points))
    prefix = [0.0]
    for n in dense:
        prefix.append(prefix[-1] + n)
    minutes, rates = [], []
    for end in [*range(stride, span, stride), span]:
        width = min(window, end)
        minutes.append(end * BUCKET_S / 60)
        rates.append((prefix[end] - prefix[end - width]) * 60 / (width * BUCKET_S))
    return minutes, rates
