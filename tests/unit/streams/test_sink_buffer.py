"""SinkBuffer keeps its rows through a failing store and tries again after a backoff."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import faust
from clickhouse_connect.driver.exceptions import OperationalError

from streams.analytics.analytics_wiring import FlushSinkBeforeCommit
from streams.analytics.sinks import SinkBuffer
from tests.builders import T0
from tests.unit.streams.test_train_step_sink import record


class FlakyClient:
    """Stands in for clickhouse-connect's client: each table's insert fails ``failures`` times."""

    def __init__(self, failures: dict[str, int]) -> None:
        self.failures = dict(failures)
        self.rows: dict[str, list] = {}

    def insert(self, table, rows, column_names):
        if self.failures.get(table, 0):
            self.failures[table] -= 1
            raise OperationalError(f"{table}: connection refused")
        self.rows.setdefault(table, []).extend(rows)


class Local:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def rollout_row(rid: str, total: float) -> list:
    return [rid, "g", "t", 0, "finished", T0, T0, 0.0, 1.0, total, 1, 1, 1, 0, -1]


def test_a_failed_insert_keeps_the_rows_until_one_succeeds():
    client, local = FlakyClient({"calls": 1}), Local()
    buffer = SinkBuffer(client, retry_s=1.0, clock=local)  # type: ignore[arg-type]
    buffer.add([rollout_row("r1", 0.5)], [["c1"], ["c2"]], [record()])
    assert buffer.flush() is False  # rollouts went in, calls failed
    assert client.rows == {"rollouts": [rollout_row("r1", 0.5)]} and buffer.pending() == 3
    buffer.add([rollout_row("r2", 0.1)], [["c3"]])
    assert buffer.flush() is False and buffer.pending() == 5  # backing off: nothing tried
    local.t += 1.0
    assert buffer.flush() is True and buffer.pending() == 0
    assert client.rows["calls"] == [["c1"], ["c2"], ["c3"]]
    assert [r[0] for r in client.rows["rollouts"]] == ["r1", "r2"]
    assert len(client.rows["train_steps"]) == 1 and buffer.failures == 0


def test_the_backoff_doubles_up_to_its_bound_and_shutdown_forces_a_last_try():
    client, local = FlakyClient({"rollouts": 5}), Local()
    buffer = SinkBuffer(client, retry_s=1.0, max_retry_s=3.0, clock=local)  # type: ignore[arg-type]
    buffer.add([rollout_row("r1", 0.5), rollout_row("r1", 0.7)])  # the newest row wins
    tried_at = []
    while len(tried_at) < 4:
        before = client.failures["rollouts"]
        buffer.flush()
        if client.failures["rollouts"] < before:
            tried_at.append(local.t)
        local.t += 0.5
    assert tried_at == [0.0, 1.0, 3.0, 6.0]  # waits 1, 2, then 3 (the bound)
    assert buffer.flush(force=True) is False and buffer.failures == 5
    assert buffer.flush(force=True) is True
    assert client.rows["rollouts"] == [rollout_row("r1", 0.7)]


def test_a_commit_beginning_inserts_what_is_buffered():
    """Faust's consumer calls its sensors' on_commit_initiated before it takes the acknowledged
    offsets: rows of a committed event are in the store before its offset is."""
    client = FlakyClient({})
    buffer = SinkBuffer(client)  # type: ignore[arg-type]
    app = faust.App("sink-commit-test", broker="kafka://127.0.0.1:1")
    app.sensors.add(FlushSinkBeforeCommit(buffer))
    buffer.add(rollouts=[rollout_row("r1", 1.0)])
    assert client.rows == {}
    app.sensors.on_commit_initiated(app.consumer)
    assert [row[0] for row in client.rows["rollouts"]] == ["r1"] and buffer.pending() == 0


def test_what_waits_for_the_rows_runs_once_they_are_stored_not_before():
    client, clock = FlakyClient({"calls": 1}), Local()
    buffer = SinkBuffer(client, retry_s=1.0, clock=clock)
    done: list[str] = []
    buffer.after_stored(lambda: done.append("nothing waited"))
    assert done == ["nothing waited"]
    buffer.add(calls=[["c1"]])
    buffer.after_stored(lambda: done.append("after c1"))
    assert not buffer.flush() and done == ["nothing waited"]  # the insert failed: it waits
    clock.t = 5.0
    assert buffer.flush() and done == ["nothing waited", "after c1"]
    assert client.rows["calls"] == [["c1"]]


def test_the_drivers_pandas_import_happens_when_the_buffer_is_made_not_at_its_first_insert():
    """A worker's first flush would otherwise block its event loop for the import."""
    script = (
        "import sys\n"
        "from streams.analytics.sinks import SinkBuffer\n"
        "assert 'pandas' not in sys.modules\n"
        "SinkBuffer(None)\n"
        "assert 'pandas' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=Path(__file__).parents[3])
