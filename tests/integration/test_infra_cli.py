"""`forge-rl infra up | status | down` on a broker of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psutil
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def forge(home, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "FORGE_HOME": str(home),
        "FORGE_KAFKA_PORT": "0",
        "FORGE_KAFKA_CONTROLLER_PORT": "0",
        "COLUMNS": "200",
    }
    env.pop("FORGE_KAFKA_BOOTSTRAP", None)
    cmd = [sys.executable, "-m", "forge_rl.cli", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_up_is_idempotent_status_reports_and_down_stops_only_its_broker(tmp_path):
    first = forge(tmp_path, "infra", "up")
    assert first.returncode == 0, first.stderr
    assert "created topics: forge.events" in first.stdout
    state = json.loads((tmp_path / "kafka" / "broker.json").read_text())
    broker = psutil.Process(state["pid"])
    try:
        second = forge(tmp_path, "infra", "up")
        assert second.returncode == 0, second.stderr
        assert "created topics" not in second.stdout
        assert json.loads((tmp_path / "kafka" / "broker.json").read_text())["pid"] == state["pid"]

        status = forge(tmp_path, "infra", "status")
        assert status.returncode == 0
        assert f"pid {state['pid']}" in status.stdout
        assert state["bootstrap"] in status.stdout
        assert broker.memory_info().rss < 1024**3
    finally:
        down = forge(tmp_path, "infra", "down")
    assert down.returncode == 0
    assert "broker stopped" in down.stdout
    assert not psutil.pid_exists(state["pid"]) or broker.status() == psutil.STATUS_ZOMBIE
    assert (tmp_path / "kafka" / "data" / "meta.properties").exists(), "down keeps data"
    assert forge(tmp_path, "infra", "status").returncode == 3

    purge = forge(tmp_path, "infra", "down", "--purge")
    assert purge.returncode == 0
    assert not (tmp_path / "kafka" / "data").exists()


def test_down_ignores_a_stale_pid_file_naming_another_process(tmp_path):
    (tmp_path / "kafka").mkdir()
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        state = {
            "pid": stranger.pid, "bootstrap": "127.0.0.1:1", "controller": "127.0.0.1:2",
            "data_dir": "x", "log_file": "y", "version": "4.4.0",
        }  # fmt: skip
        (tmp_path / "kafka" / "broker.json").write_text(json.dumps(state))
        result = forge(tmp_path, "infra", "down")
        assert result.returncode == 0
        assert "no local broker was running" in result.stdout
        assert stranger.poll() is None, "down must never stop a process it did not start"
    finally:
        stranger.kill()
        stranger.wait()


def test_up_against_an_external_cluster_only_creates_topics(kafka, tmp_path):
    env = {
        **os.environ,
        "FORGE_HOME": str(tmp_path),
        "FORGE_KAFKA_BOOTSTRAP": kafka,
        "COLUMNS": "200",
    }
    cmd = [sys.executable, "-m", "forge_rl.cli", "infra", "up"]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert f"Kafka (external cluster) at {kafka}" in result.stdout
    assert not (tmp_path / "kafka").exists(), "no local broker may be started"
