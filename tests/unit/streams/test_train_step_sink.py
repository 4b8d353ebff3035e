"""train_steps rows carry the diagnostics and time split, and an older table gains the columns."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import fields

import pytest

from infra.analytics import MIGRATIONS, TRAIN_STEP_ADDED_COLUMNS
from schemas.records import TrainStep
from streams.analytics.sinks import TRAIN_STEP_COLUMNS, train_step_rows
from tests.builders import T0

FIRST_RELEASE = (
    "step", "policy_version", "ts", "loss", "samples", "tokens", "unique_tokens",
    "dedup_ratio", "clip_fraction", "staleness_mean", "staleness_max", "step_time_s",
)  # fmt: skip


def record(**extra) -> TrainStep:
    return TrainStep(7, 7, 0.5, 8, 100, 40, 2.5, 0.1, 0.5, 1, 0.2, T0, **extra)


def test_the_columns_are_the_first_release_plus_the_added_ones():
    added = [name for name, _ in TRAIN_STEP_ADDED_COLUMNS]
    assert FIRST_RELEASE + tuple(added) == TRAIN_STEP_COLUMNS
    assert set(TRAIN_STEP_COLUMNS) <= {f.name for f in fields(TrainStep)}
    assert all(f"ADD COLUMN IF NOT EXISTS {name} " in MIGRATIONS["train_steps"] for name in added)


def test_a_row_holds_the_diagnostics_and_the_time_split():
    row = dict(zip(TRAIN_STEP_COLUMNS, train_step_rows([record(kl_mean=0.02, optimizer_s=0.3,
               kl_filtered_samples=2, checkpoint_s=1.5)])[0], strict=True))  # fmt: skip
    assert (row["kl_mean"], row["optimizer_s"], row["checkpoint_s"]) == (0.02, 0.3, 1.5)
    assert row["kl_filtered_samples"] == 2 and row["ratio_max"] == 0.0


# In a child process: chDB admits one data directory per process.
ENSURE_THEN_INSERT = """
import json, sys
from datetime import UTC, datetime
import clickhouse_connect
from infra.analytics import ensure_tables
from schemas.records import TrainStep
from streams.analytics.sinks import insert_train_steps
client = clickhouse_connect.get_client(dsn="chdb://" + sys.argv[1])
old = sys.argv[2] == "old"
if old:
    client.command('''CREATE TABLE train_steps (step Int64, policy_version Int64,
    ts DateTime64(6, 'UTC'), loss Float64, samples UInt32, tokens UInt64, unique_tokens UInt64,
    dedup_ratio Float64, clip_fraction Float64, staleness_mean Float64, staleness_max Int64,
    step_time_s Float64) ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(ts)
    ORDER BY (ts, policy_version, step)''')
    client.command("INSERT INTO train_steps VALUES (1, 1, '2026-11-01 00:00:00', 0.5, 8, 100, "
                   "40, 2.5, 0.1, 0.5, 1, 0.2)")
t0 = datetime(2026, 11, 1, tzinfo=UTC)
ensure_tables(client)
ensure_tables(client)
insert_train_steps(client, [TrainStep(2, 2, 0.4, 8, 100, 40, 2.5, 0.1, 0.5, 1, 0.2, t0,
                                      kl_max=0.7, forward_backward_s=1.25)])
rows = client.query("SELECT step, kl_max, forward_backward_s, kl_filtered_samples "
                    "FROM train_steps FINAL ORDER BY step").result_rows
print("ROWS" + json.dumps([list(r) for r in rows]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("store", ["old", "fresh"])
def test_an_old_table_gains_the_new_columns_and_a_fresh_one_has_them(tmp_path, store):
    done = subprocess.run(
        [sys.executable, "-c", ENSURE_THEN_INSERT, str(tmp_path / "chdb"), store],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("ROWS"))
    old_row = [[1, 0.0, 0.0, 0]] if store == "old" else []
    assert json.loads(line[4:]) == [*old_row, [2, 0.7, 1.25, 0]]
