"""What `forge-rl run` prints and keeps when its agents stop: the analytics reports once the
sink has stored every rollout, each domain's learning, where the data lives, and the
`summary.json` that `bench/main_job.py` reads. Separate from the run's supervision so the end
of a run reads in one place."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from envs.fleet import Episode
from forge_rl.learning import LearningSummary, learning_summary
from forge_rl.progress import status
from infra.config import InfraSettings


@dataclass(frozen=True)
class RunLearning:
    """The run's task rewards, and each domain's when it has several."""

    overall: LearningSummary
    by_domain: dict[str, LearningSummary]

    def as_record(self) -> dict[str, Any]:
        return {
            "learning": self.overall.as_dict(),
            "learning_by_domain": {d: part.as_dict() for d, part in self.by_domain.items()},
        }


def run_learning(episodes_by_start: Sequence[Episode]) -> RunLearning:
    domains = sorted({e.domain for e in episodes_by_start})
    by_domain = (
        {
            d: learning_summary([e.reward for e in episodes_by_start if e.domain == d])
            for d in domains
        }
        if len(domains) > 1
        else {}
    )
    return RunLearning(learning_summary([e.reward for e in episodes_by_start]), by_domain)


def episodes_record(episodes_by_start: Sequence[Episode]) -> dict[str, Any]:
    """Every episode as [seconds after the first start, domain, status, task reward]."""
    first = episodes_by_start[0].started if episodes_by_start else 0.0
    return {
        "truncated": sum(e.status == "truncated" for e in episodes_by_start),
        "episodes": [
            [round(e.started - first, 3), e.domain, e.status, e.reward] for e in episodes_by_start
        ],
    }


def wait_for_sink(
    web_url: str, home: Path, expected: int, timeout_s: float, console: Console
) -> int:
    """Rollouts the worker's store holds, polled until it holds ``expected`` or time is up."""
    from infra.analytics import AnalyticsUnavailableError, owner_key, query_owner
    from streams.analytics.reports import STORED_ROLLOUTS

    deadline = time.monotonic() + timeout_s
    count = 0
    with status(console, "waiting for the sink to store every rollout…"):
        while time.monotonic() < deadline:
            try:
                _, rows = query_owner(web_url, STORED_ROLLOUTS, key=owner_key(home))
                count = int(rows[0][0])
            except AnalyticsUnavailableError:
                pass
            if count >= expected:
                break
            time.sleep(1)
    return count


def analytics_tables(
    web_url: str, home: Path, served_version: int, console: Console
) -> dict[str, Any]:
    """The closing reports, printed, and kept as {name: {columns, rows}}."""
    from infra.analytics import AnalyticsUnavailableError, owner_key, query_owner
    from streams.analytics.reports import COSTS, REPORTS, ROLLOUT_TIME, rewards_by_version_groups

    reports = {
        "rewards": rewards_by_version_groups(served_version // 10 + 1),
        **{name: REPORTS[name] for name in ("durations", "staleness", "domains")},
        "costs": COSTS,
        "rollout_time": ROLLOUT_TIME,
    }
    tables: dict[str, Any] = {}
    for name, (title, sql) in reports.items():
        try:
            columns, rows = query_owner(web_url, sql, key=owner_key(home))
        except AnalyticsUnavailableError as exc:
            console.print(f"[yellow]{title}: {exc}[/yellow]")
            continue
        tables[name] = {"columns": columns, "rows": [list(r) for r in rows]}
        print_table(console, title, columns, rows)
    return tables


def print_table(
    console: Console, title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
) -> None:
    """One closing report as a table (at its natural width off a terminal: ``console_for``)."""
    table = Table(*columns, title=title)
    for row in rows:
        table.add_row(*(str(v) for v in row))
    console.print(table)


def print_learning(learning: RunLearning, console: Console) -> None:
    for name, part in [("rewards", learning.overall), *learning.by_domain.items()]:
        console.print(
            f"{name} (task reward per rollout, {part.rollouts} rollouts, "
            f"{part.aborted} aborted or truncated): first 20% {part.first.mean:+.3f} "
            f"± {part.first.std:.3f} → last 20% {part.last.mean:+.3f} "
            f"± {part.last.std:.3f} (gain {part.gain:+.3f})"
        )


def print_where_data_lives(
    console: Console, infra: InfraSettings, bootstrap: str, run_dir: Path, started_broker: bool
) -> None:
    home = infra.home
    table = Table(title="where the data lives", show_header=False)
    kafka = f"{bootstrap} (forge.events is the source of truth)"
    if started_broker:
        kafka += "; stopped with this run, `forge-rl infra up` restarts it with its data"
    table.add_row("Kafka", kafka)
    table.add_row("analytics", infra.clickhouse_url or str(infra.chdb_path))
    table.add_row("policies", str(home / "policies"))
    table.add_row("checkpoints", str(home / "trainer" / "checkpoints"))
    table.add_row("logs, summary", str(run_dir))
    console.print(table)
