"""The live worker's /query/ endpoint: loopback only, a key, ClickHouse read-only with the parser
check, a time limit, and the worker answering while a query runs; the CLI with zero config."""

from __future__ import annotations

import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from infra.analytics import owner_key_file
from tests.integration.logged_process import LoggedProcess
from tests.integration.test_streams_worker import prepared_log

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def worker(kafka, tmp_path_factory):
    """A worker over a one-group log, its queries limited to 3 s; (process, url, env)."""
    home = tmp_path_factory.mktemp("sql-endpoint")
    *_, env = prepared_log(kafka, home, 4, garbage=False)
    env["FORGE_STREAMS_SQL_TIMEOUT_S"] = "3"
    url = f"http://127.0.0.1:{env['FORGE_STREAMS_WEB_PORT']}"
    cmd = [sys.executable, "-m", "forge_rl.cli", "streams"]
    process = LoggedProcess(cmd, env, home / "logs")
    deadline = time.monotonic() + 180
    while not _answers(url):
        assert process.poll() is None, process.log_tail()
        assert time.monotonic() < deadline, "the worker's web port never answered"
        time.sleep(0.5)
    yield process, url, env
    process.send_signal(signal.SIGTERM)
    process.wait(30)


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def ask(url: str, sql: str, key: str | None):
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    return httpx.get(f"{url}/query/", params={"sql": sql}, headers=headers, timeout=30)


def published_key(env) -> str:
    return owner_key_file(Path(env["FORGE_HOME"])).read_text()


def test_the_web_port_listens_on_loopback_only(worker):
    process, url, _ = worker
    port = int(url.rsplit(":", 1)[1])
    listening = [
        c.laddr.ip
        for c in psutil.Process(process.pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port
    ]
    assert listening == ["127.0.0.1"]


def test_a_key_is_required_and_published_privately(worker):
    _, url, env = worker
    path = owner_key_file(Path(env["FORGE_HOME"]))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ask(url, "SELECT 1", None).status_code == 401
    assert ask(url, "SELECT 1", "x" * 43).status_code == 403
    assert ask(url, "SELECT 1", published_key(env)).json()["rows"] == [["1"]]


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        ("SELECT * FROM file('/etc/passwd', 'LineAsString')", "file"),
        ("SELECT file('/etc/passwd')", "file"),
        ("SELECT * FROM url('http://127.0.0.1:9/x', 'LineAsString')", "url"),
        ("SELECT * FROM remote('127.0.0.1:9000', system.one)", "remote"),
        ("DROP TABLE rollouts", "only SELECT"),
    ],
)
def test_outside_reach_and_writes_are_refused(worker, sql, reason):
    _, url, env = worker
    response = ask(url, sql, published_key(env))
    assert response.status_code == 400 and reason in response.json()["error"]
    assert "root:" not in response.text


def test_a_slow_query_is_stopped_while_the_worker_keeps_answering(worker):
    _, url, env = worker
    slow: list[httpx.Response] = []
    query = threading.Thread(
        target=lambda: slow.append(
            # minutes of hashing: nothing ClickHouse can answer from metadata
            ask(url, "SELECT max(sipHash64(number)) FROM numbers(100000000000)", published_key(env))
        )
    )
    started = time.monotonic()
    query.start()
    time.sleep(0.5)
    assert _answers(url)  # the event loop is free while the query runs...
    assert query.is_alive() and time.monotonic() - started < 2.5  # ...well before it ends
    query.join(30)
    # Stopped by the limit, long before its natural end (minutes); ClickHouse may stop it
    # before the limit itself when it estimates the query cannot finish within it.
    assert not query.is_alive()
    assert slow[0].status_code == 400 and "Timeout exceeded" in slow[0].json()["error"]


def test_the_cli_reads_the_workers_key_with_no_configuration(worker):
    _, _, env = worker
    cli = [sys.executable, "-m", "forge_rl.cli"]
    sql = "SELECT count() > 0 AS scored FROM rollouts FINAL"
    deadline = time.monotonic() + 120
    while True:  # the worker scores the one group in its own time
        out = subprocess.run([*cli, "query", sql, "--format", "tsv"], env=env,
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        assert out.returncode == 0, out.stderr
        if out.stdout.split() == ["scored", "1"] or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert out.stdout.split() == ["scored", "1"]
    report = subprocess.run([*cli, "analytics", "--sql", "SELECT 42 AS answer"], env=env,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert report.returncode == 0 and "42" in report.stdout, report.stderr
