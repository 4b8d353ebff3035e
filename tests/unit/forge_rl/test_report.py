"""The picture report: its SQL on a private chDB holding a hand-made run, every PNG drawn with
data, the page pointing at each; the run span read from summary.json."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from forge_rl.report import PAGE, PICTURES, render_report
from forge_rl.report_data import Span, cost_bucket_s, frames, per_minute, report_queries, run_span

# In a child process: chDB admits one data directory per process (the session's store is
# another). Rollouts and steps of a small run, plus rows outside its span that must not count.
MAKE_AND_RENDER = """
import asyncio, sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
import clickhouse_connect
from infra.analytics import ensure_tables
from streams.analytics.sql_endpoint import SqlEndpoint, session_settings
from forge_rl.report import write_report
from forge_rl.report_data import Span
from schemas.records import TrainStep
from streams.analytics.sinks import insert_train_steps

client = clickhouse_connect.get_client(dsn="chdb://" + sys.argv[1])
ensure_tables(client)
t0 = datetime(2026, 11, 1, 12, tzinfo=UTC)

def rollout(i, when):
    version = i // 6
    solved = (i * 7) % 10 < 3 + version
    status = "aborted" if i % 11 == 5 else "finished"
    values = dict(rollout_id=f"r{i}", group_id=f"g{i // 4}", task_id="t", queue_index=i,
                  status=status, started_at=when - timedelta(seconds=3), ended_at=when,
                  duration_s=3.0, outcome_reward=None if status == "aborted" else float(solved),
                  total_reward=float(solved) - 0.1 * (i % 3), num_calls=2, prompt_tokens=50,
                  completion_tokens=20, policy_version=version, staleness=-1 if i == 47 else i % 4,
                  domain="chat" if i % 3 == 0 else "math")
    return values

rows = [rollout(i, t0 + timedelta(seconds=4 * i)) for i in range(48)]
rows.append(rollout(99, t0 - timedelta(days=1)))  # another run's, outside the span
client.insert("rollouts", [list(r.values()) for r in rows], column_names=list(rows[0]))
steps = [TrainStep(s, s + 1, 0.5 - 0.02 * s, 8, 800, 500, 1.6, 0.05 * (s % 3), 1.0 + s % 2,
                   2 + s % 3, 0.8 + 0.05 * s, t0 + timedelta(seconds=20 * s + 15),
                   kl_mean=1e-3 * (s + 1), kl_max=1e-2 * (s + 1), ratio_mean=1.0 + 0.01 * s,
                   ratio_std=0.05, ratio_max=1.3 + 0.02 * s, wait_data_s=0.3, tree_build_s=0.05,
                   forward_backward_s=0.4, optimizer_s=0.1, export_s=0.2 * (s > 0),
                   checkpoint_s=0.5 * (s % 4 == 1))
         for s in range(9)]
insert_train_steps(client, steps)
calls = [dict(call_id=f"c{i}.{k}", rollout_id=f"r{i}", ts=t0 + timedelta(seconds=4 * i - 3 + k),
              policy_version=i // 6, prompt_tokens=40, new_prompt_tokens=20, completion_tokens=10,
              latency_ms=600.0 + 40 * (i % 5), finish_reason="stop", retokenization_drift=0)
         for i in range(48) for k in range(2)]
client.insert("calls", [list(c.values()) for c in calls], column_names=list(calls[0]))
span = Span(t0 - timedelta(minutes=1), t0 + timedelta(minutes=9), "run-test")

# As `forge-rl run` asks: through the worker's endpoint (its parser check, its read-only
# session, every value sent as text).
session = clickhouse_connect.get_client(dsn="chdb://" + sys.argv[1],
                                        settings=session_settings(60, 100_000))
endpoint = SqlEndpoint(session, "k" * 32, lambda: None)

def ask(queries):
    replies = [asyncio.run(endpoint.answer("Bearer " + "k" * 32, sql)) for _, sql in queries]
    assert all(r.status == 200 for r in replies), [r.body for r in replies]
    return [(r.body["columns"], r.body["rows"]) for r in replies]

print(write_report(ask, Path(sys.argv[2]), span))
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("report")
    out = root / "report"
    result = subprocess.run(
        [sys.executable, "-c", MAKE_AND_RENDER, str(root / "chdb"), str(out)],
        capture_output=True, text=True, timeout=240, cwd=Path(__file__).parents[3],
        env={**os.environ, "MPLBACKEND": "Agg"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == str(out / PAGE)
    return out


def test_every_picture_is_written_and_the_page_shows_each(rendered):
    page = (rendered / PAGE).read_text()
    sources = re.findall(r'<img src="([^"]+)"', page)
    assert sources == [p.file for p in PICTURES]
    assert len(re.findall(r"<figcaption>[^<]+</figcaption>", page)) == len(PICTURES)
    for picture in PICTURES:
        png = (rendered / picture.file).read_bytes()
        assert png.startswith(b"\x89PNG\r\n\x1a\n")
        assert len(png) > 20_000, picture.file  # a drawn chart, not a "no data" canvas
    assert "run-test" in page and "2026-11-01 11:59:00 UTC" in page


def test_an_empty_span_still_writes_every_picture(tmp_path):
    span = Span(label="empty")
    empty = {name: ([], []) for name in report_queries(span)}
    page = render_report(frames(empty), tmp_path, span)
    assert page == tmp_path / PAGE
    for picture in PICTURES:
        assert (tmp_path / picture.file).stat().st_size > 1000


def test_the_span_filters_each_table_on_its_event_time():
    start = datetime(2026, 11, 1, 12, tzinfo=UTC)
    queries = report_queries(Span(start, start + timedelta(hours=1)))
    rewards, steps = queries["rewards"][1], queries["steps"][1]
    assert "ended_at >= toDateTime64('2026-11-01 12:00:00.000000', 6, 'UTC')" in rewards
    assert "ts < toDateTime64('2026-11-01 13:00:00.000000', 6, 'UTC')" in steps
    assert "WHERE" not in report_queries(Span())["staleness"][1]


def test_the_cost_bucket_gives_about_sixty_over_a_closed_span():
    start = datetime(2026, 11, 1, 12, tzinfo=UTC)
    assert cost_bucket_s(Span(start, start + timedelta(minutes=10))) == 10
    assert cost_bucket_s(Span(start, start + timedelta(hours=2))) == 120
    assert cost_bucket_s(Span(start, start + timedelta(days=30))) == 3600
    assert cost_bucket_s(Span(start)) == 60
    assert (
        "INTERVAL 120 SECOND" in report_queries(Span(start, start + timedelta(hours=2)))["costs"][1]
    )


def test_run_span_reads_summary_times_then_falls_back_to_the_run_id(tmp_path):
    runs = tmp_path / "runs"
    (runs / "run-20261101-120000").mkdir(parents=True)
    (runs / "run-20261101-120000" / "summary.json").write_text(json.dumps({
        "started_at": "2026-11-01T12:00:03+00:00", "ended_at": "2026-11-01T12:30:00+00:00",
    }))  # fmt: skip
    span = run_span(runs, "run-20261101-120000")
    assert (span.start, span.end) == (
        datetime(2026, 11, 1, 12, 0, 3, tzinfo=UTC),
        datetime(2026, 11, 1, 12, 30, tzinfo=UTC),
    )
    (runs / "run-20261102-080000").mkdir()
    running = run_span(runs, "run-20261102-080000")
    assert running.start == datetime(2026, 11, 2, 8, tzinfo=UTC) and running.end is None
    (runs / "run-20261102-080000" / "summary.json").write_text("{}")
    assert run_span(runs, "run-20261102-080000").end is not None  # when it was written
    with pytest.raises(Exception, match="no run 'nope'"):
        run_span(runs, "nope")


def test_throughput_is_a_trailing_rate_per_minute_with_gaps_as_zero():
    minutes, rates = per_minute([0, 10, 40], [2, 4, 6])
    assert minutes == pytest.approx([1 / 6, 2 / 6, 3 / 6, 4 / 6, 5 / 6])
    assert rates == pytest.approx([12, 18, 12, 9, 14.4])  # over the time elapsed so far
    minutes, rates = per_minute([i * 10.0 for i in range(600)], [1.0] * 600, points=120)
    assert len(rates) == 120 and minutes[-1] == 100
    assert rates == pytest.approx([6.0] * 120)
    assert per_minute([], []) == ([], [])


def forge_rl_cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """In a child process: the command opens chDB, one data directory per process."""
    return subprocess.run(
        [sys.executable, "-m", "forge_rl.cli", *args],
        capture_output=True, text=True, timeout=240, cwd=Path(__file__).parents[3],
        env={**os.environ, "FORGE_HOME": str(home), "COLUMNS": "200"},
    )  # fmt: skip


def test_the_command_reports_an_empty_store_and_refuses_an_unknown_run(tmp_path):
    result = forge_rl_cli(tmp_path, "report", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert str(tmp_path / "out" / PAGE) in result.stdout
    assert all((tmp_path / "out" / p.file).exists() for p in PICTURES)
    result = forge_rl_cli(tmp_path, "report", "--run", "run-x", "--out", str(tmp_path / "x"))
    assert result.returncode == 1 and "no run 'run-x'" in result.stderr


MOVING = """
import json, sys
from datetime import UTC, datetime, timedelta
import clickhouse_connect
from infra.analytics import ensure_tables
from forge_rl.report_data import moving_rewards_sql

client = clickhouse_connect.get_client(dsn="chdb://" + sys.argv[1])
ensure_tables(client)
t0 = datetime(2026, 11, 1, 12, tzinfo=UTC)
# (version, seconds after t0, reward, outcome, status, domain): inserted out of order
made = [(1, 5, 1.0, 1.0, "finished", "a"), (0, 9, -0.5, 0.0, "finished", "b"),
        (0, 2, 0.5, None, "aborted", "a"), (1, 1, 0.25, 1.0, "finished", "b"),
        (0, 4, 0.0, 0.0, "finished", "a")]
rows = [dict(rollout_id=f"r{i}", group_id="g", task_id="t", queue_index=i, status=status,
             started_at=t0, ended_at=t0 + timedelta(seconds=s), duration_s=1.0,
             outcome_reward=outcome, total_reward=reward, num_calls=1, prompt_tokens=1,
             completion_tokens=1, policy_version=v, staleness=0, domain=domain)
        for i, (v, s, reward, outcome, status, domain) in enumerate(made)]
client.insert("rollouts", [list(r.values()) for r in rows], column_names=list(rows[0]))
for by_domain in (False, True):
    result = client.query(moving_rewards_sql("", by_domain=by_domain))
    print(json.dumps([list(r) for r in result.result_rows]))
"""


def test_the_reward_pictures_draw_trailing_means_over_rollouts_in_version_order(tmp_path):
    """By version, then by end: each rollout placed at its version plus its share of that
    version's rollouts before it; the means trail over the rollouts so far (fewer than the
    window here), per domain when asked."""
    result = subprocess.run(
        [sys.executable, "-c", MOVING, str(tmp_path / "chdb")], capture_output=True, text=True,
        timeout=120, cwd=Path(__file__).parents[3],
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    overall, by_domain = (json.loads(line) for line in result.stdout.splitlines())
    # in order: v0 @2 (0.5, aborted), v0 @4 (0.0, unsolved), v0 @9 (-0.5), v1 @1, v1 @5
    assert [round(r[1], 4) for r in overall] == [0.0, 0.3333, 0.6667, 1.0, 1.5]
    assert [r[2] for r in overall] == [0.5, 0.0, -0.5, 0.25, 1.0]
    assert [round(r[3], 4) for r in overall] == [0.5, 0.25, 0.0, 0.0625, 0.25]
    assert [round(r[4], 4) for r in overall] == [0.0, 0.0, 0.0, 0.3333, 0.5]  # solved share
    assert [round(r[5], 4) for r in overall] == [1.0, 0.5, 0.3333, 0.25, 0.2]  # aborted
    a = [r for r in by_domain if r[0] == "a"]
    assert [r[2] for r in a] == [0.5, 0.0, 1.0]
    assert [round(r[3], 4) for r in a] == [0.5, 0.25, 0.5]
