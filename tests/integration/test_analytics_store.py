"""The analytics store on real ClickHouse SQL (embedded chDB, or FORGE_CLICKHOUSE_URL)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime

import pytest

from infra.analytics import TABLES, ensure_tables, query_rows

pytestmark = pytest.mark.integration


def test_ddl_is_idempotent(analytics):
    ensure_tables(analytics)
    _, rows = query_rows(
        analytics, "SELECT name FROM system.tables WHERE database = currentDatabase()"
    )
    assert set(TABLES) <= {r[0] for r in rows}


def test_tables_sort_by_time_and_policy_version(analytics):
    _, rows = query_rows(
        analytics,
        "SELECT name, sorting_key FROM system.tables WHERE database = currentDatabase()",
    )
    keys = dict(rows)
    for table in TABLES:
        assert "policy_version" in keys[table]
        assert "ts" in keys[table] or "ended_at" in keys[table]


def test_reinserting_a_row_is_idempotent(analytics):
    row = [7, 7, datetime(2026, 11, 1, tzinfo=UTC), 0.5, 8, 100, 40, 2.5, 0.1, 0.5, 1, 0.2]
    columns = [
        "step", "policy_version", "ts", "loss", "samples", "tokens", "unique_tokens",
        "dedup_ratio", "clip_fraction", "staleness_mean", "staleness_max", "step_time_s",
    ]  # fmt: skip
    analytics.insert("train_steps", [row, row], column_names=columns)
    analytics.insert("train_steps", [row], column_names=columns)
    _, rows = query_rows(analytics, "SELECT count() FROM train_steps FINAL WHERE step = 7")
    assert rows == [(1,)]


def test_a_second_process_cannot_open_the_owned_directory(analytics, infra_settings):
    if infra_settings.clickhouse_url:
        pytest.skip("a ClickHouse server has no single-owner rule")
    code = (
        "from infra.analytics import analytics_client; from infra.config import InfraSettings\n"
        f"analytics_client(InfraSettings(home={str(infra_settings.home)!r}))"
    )
    env = {k: v for k, v in os.environ.items() if k != "FORGE_CLICKHOUSE_URL"}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode != 0
    assert "held by another process" in result.stderr


def test_train_steps_from_metrics_records_are_idempotent(analytics):
    from schemas.records import TrainStep
    from streams.analytics.sinks import insert_train_steps
    from tests.builders import T0

    steps = [
        TrainStep(100 + i, 100 + i, 0.1 * i, 8, 1000, 250, 4.0, 0.05, 0.5, 1, 0.2, T0)
        for i in range(3)
    ]
    assert insert_train_steps(analytics, steps) == 3
    insert_train_steps(analytics, steps[1:])  # re-published after a trainer restart
    _, rows = query_rows(
        analytics, "SELECT step, dedup_ratio FROM train_steps FINAL WHERE step >= 100 ORDER BY step"
    )
    assert rows == [(100, 4.0), (101, 4.0), (102, 4.0)]


def test_every_ready_report_runs(analytics):
    from schemas.records import TrainStep
    from streams.analytics.reports import REPORTS
    from streams.analytics.sinks import insert_rollouts, insert_train_steps, rollout_row
    from tests.builders import T0, trajectory

    insert_rollouts(analytics, [rollout_row(trajectory(), staleness=1)])
    insert_train_steps(analytics, [TrainStep(900, 900, 0.1, 8, 100, 50, 2.0, 0.0, 0.5, 1, 0.1, T0)])
    for title, sql in REPORTS.values():
        columns, rows = query_rows(analytics, sql)
        assert columns and rows, title
