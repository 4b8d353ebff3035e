"""`forge-rl run` end to end: every stage moves data, Ctrl-C and crashes stop what it started."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
BLACK_BOX = f"{sys.executable} {ROOT / 'examples' / 'agents' / 'interval_agent.py'}"


def _env(home: Path) -> dict[str, str]:
    env = {**os.environ, "FORGE_HOME": str(home), "FORGE_KAFKA_PORT": "0",
           "FORGE_KAFKA_CONTROLLER_PORT": "0", "COLUMNS": "200", "HF_HUB_OFFLINE": "1"}  # fmt: skip
    env.pop("FORGE_KAFKA_BOOTSTRAP", None)
    return env


def forge(home: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "forge_rl.cli", "--config", str(QUICKSTART), *args]
    return subprocess.run(cmd, env=_env(home), capture_output=True, text=True, timeout=timeout,
                          check=False)  # fmt: skip


def start(home: Path, *args: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "forge_rl.cli", "--config", str(QUICKSTART), "run", *args]
    return subprocess.Popen(cmd, env=_env(home), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def scalar(home: Path, sql: str) -> int:
    out = forge(home, "query", sql, "--format", "tsv")
    assert out.returncode == 0, out.stderr
    return int(out.stdout.splitlines()[1])


def wait_for_agents(home: Path, runner: subprocess.Popen[str], timeout_s: float = 150) -> None:
    """Until two groups of rollouts have finished (the gateway's counter), and a moment more
    for the streams worker to score them."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert runner.poll() is None, runner.communicate()
        for log in home.glob("runs/*/logs/gateway.log"):
            port = log.read_text().partition("gateway on http://127.0.0.1:")[2].split(" ")[0]
            if port and _finished_rollouts(int(port)) >= 8:
                time.sleep(3)
                return
        time.sleep(1)
    raise AssertionError("no rollouts finished in time")


def _finished_rollouts(port: int) -> float:
    import httpx

    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return 0
    prefix = 'forge_gateway_rollouts_total{status="finished"}'
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(prefix))  # fmt: skip


def descendants(proc: subprocess.Popen[str]) -> list[psutil.Process]:
    return psutil.Process(proc.pid).children(recursive=True)


def kill_run(runner: subprocess.Popen[str]) -> None:
    """A failed test's run: its services run in sessions of their own, so they are killed
    with it, not left running for the tests after it."""
    for process in [*descendants(runner), psutil.Process(runner.pid)]:
        with contextlib.suppress(psutil.Error):
            process.kill()
    runner.wait(30)


def command_line(process: psutil.Process) -> list[str]:
    """Its command line; none for a process that has just ended (an agent's episode, say: a
    zombie until reaped), which is no service."""
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def assert_all_gone(processes: list[psutil.Process]) -> None:
    _, alive = psutil.wait_procs(processes, timeout=30)
    assert not alive, [command_line(p) for p in alive]


def test_every_stage_moves_data_and_a_new_policy_serves_later_calls(tmp_path):
    started = time.monotonic()
    run = forge(tmp_path, "run", "--fresh", "--until-policy", "2", "--duration", "150",
                timeout=280)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert time.monotonic() - started < 180
    for heading in ("Reward by policy version", "Completion time", "Staleness at consumption",
                    "where the data lives", "first 20%"):  # fmt: skip
        assert heading in run.stdout
    (summary_file,) = tmp_path.glob("runs/*/summary.json")
    summary = json.loads(summary_file.read_text())
    assert summary["pipeline"]["events"] > 0  # gateway -> forge.events
    assert summary["pipeline"]["samples"] > 0  # worker -> forge.train
    assert summary["served_version"] >= 2  # trainer -> forge.policy -> engine
    assert summary["learning"]["rollouts"] >= 8 and summary["learning"]["aborted"] == 0
    assert scalar(tmp_path, "SELECT count() FROM calls") > 0  # events, sunk
    assert scalar(tmp_path, "SELECT count() FROM rollouts FINAL") > 0  # trajectories, scored
    assert scalar(tmp_path, "SELECT count() FROM rollouts FINAL WHERE staleness >= 0") > 0
    assert scalar(tmp_path, "SELECT count() FROM train_steps FINAL") >= 2  # training steps
    later = "SELECT count() FROM calls WHERE policy_version >= 1"
    assert scalar(tmp_path, later) > 0, "the engine never answered with a trained policy"
    assert "forge-rl infra up` restarts it" in run.stdout  # the broker it started is stopped
    assert forge(tmp_path, "infra", "status").returncode == 3


def test_a_black_box_agent_command_plays_and_ctrl_c_stops_everything(tmp_path):
    runner = start(tmp_path, "--fresh", "--agent-for", "guess", BLACK_BOX, "--duration", "600")
    try:
        wait_for_agents(tmp_path, runner)
        children = descendants(runner)
        assert {"gateway", "streams", "trainer"} <= {
            arg for p in children for arg in command_line(p)[-3:]
        }
        runner.send_signal(signal.SIGINT)
        _, err = runner.communicate(timeout=90)
    finally:
        if runner.poll() is None:
            kill_run(runner)
    assert runner.returncode == 130, err[-3000:]
    assert "every process this run started has been stopped" in err
    assert_all_gone(children)
    assert scalar(tmp_path, "SELECT count() FROM calls") > 0  # the black box's and echo's
    (agents_log,) = tmp_path.glob("runs/*/logs/agents.log")
    assert "plays the guess task only" not in agents_log.read_text()  # echo kept its own agent


def test_a_crashed_service_is_reported_and_the_rest_stopped(tmp_path):
    runner = start(tmp_path, "--fresh", "--duration", "600")
    try:
        wait_for_agents(tmp_path, runner)
        children = descendants(runner)
        (trainer,) = [p for p in children if command_line(p)[-1:] == ["trainer"]]
        trainer.kill()
        _, err = runner.communicate(timeout=90)
    finally:
        if runner.poll() is None:
            kill_run(runner)
    assert runner.returncode == 1
    assert "trainer exited with code -9" in err
    assert_all_gone(children)
