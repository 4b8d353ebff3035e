"""The pipeline on a local cluster of three brokers (``forge-rl infra up --brokers 3``) under
the chaos run's kill -9s of one broker, of the active controller and of a majority, seed
fixed: no agent sees an error while one broker is lost (a leader change is retried inside the
gateway's produce), with two of three down the gateway fails closed (503 + Retry-After), and
every check of the chaos run holds on the log afterwards — nothing acknowledged lost,
duplicated, trained twice or skipped, forge.train a replay. In the test command; alone:
`scripts/test.sh -m cluster`.

Seed 6 plays the kinds as controller, broker, majority: the majority last, since its recovery
counts the 36 s it is down and then waits on the groups whose starts it refused (52 and 85 s in
two runs); with seed 3 (majority second) the slow one left no time for the broker."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MINUTES = 3
pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.cluster,
    pytest.mark.timeout(MINUTES * 60 + 420),
]


def test_a_cluster_loses_a_broker_without_an_agent_noticing(tmp_path):
    home = tmp_path / "cluster"
    command = [
        sys.executable, str(ROOT / "bench" / "chaos.py"), "--brokers", "3",
        "--kinds", "broker,controller,majority", "--minutes", str(MINUTES), "--seed", "6",
        "--home", str(home), "--max-wall", str(MINUTES * 60 + 300),
    ]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, timeout=MINUTES * 60 + 360)
    summary = json.loads((home / "chaos-summary.json").read_text())
    checks = {c["name"]: c for c in summary["checks"]}
    failed = [f"{name}: {c['detail']}" for name, c in checks.items() if not c["passed"]]
    assert not failed, "\n".join([*failed, *summary["failures"], run.stdout[-4000:]])
    kinds = {fault["kind"] for fault in summary["faults"]}
    assert kinds == {"broker", "controller", "majority"}, kinds
    assert "agents: no error while one broker is lost" in checks  # passed, as every check
    # Fail closed: with a majority down the agents were refused (503 + Retry-After, which the
    # check "agents: only 429/503 + Retry-After" holds) and still nothing acknowledged is lost.
    assert summary["agents_refused_by_kind"]["majority"] > 0, summary["agents_refused_by_kind"]
