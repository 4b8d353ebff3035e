"""A short chaos run, seed fixed: the whole pipeline under kill -9s, a pause past the session
timeout and a broker restart, then every check of ``bench/chaoslib/chaos_checks`` on the log
(acknowledged rollouts kept, forge.train a replay, nothing trained twice or skipped, policy
versions increasing, agents answered only 2xx or 429/503 with Retry-After, the workers'
analytics tables equal to a rebuild from the log). In the test command; alone:
`scripts/test.sh -m chaos`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MINUTES = 5
# Issue #16; in CI since the worker keeps no tables (members were lost by changelogs not
# atomic with the commits: docs/decisions.md, Chaos). Its own
# timeout: pytest-timeout's 300 s default would stop it at the end of the agents' 5 minutes
# and leave its services running.
pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.chaos,
    pytest.mark.timeout(MINUTES * 60 + 360),
]


def test_a_short_chaos_run_keeps_every_promise(tmp_path):
    command = [
        sys.executable, str(ROOT / "bench" / "chaos.py"), "--minutes", str(MINUTES),
        "--seed", "7", "--home", str(tmp_path / "chaos"), "--max-wall", str(MINUTES * 60 + 240),
    ]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, timeout=MINUTES * 60 + 300)
    summary = json.loads((tmp_path / "chaos" / "chaos-summary.json").read_text())
    checks = {c["name"]: c for c in summary["checks"]}
    failed = [f"{name}: {c['detail']}" for name, c in checks.items() if not c["passed"]]
    assert not failed, "\n".join([*failed, *summary["failures"], run.stdout[-4000:]])
    kinds = {fault["kind"] for fault in summary["faults"]}
    # Seed 7 here: 11 faults in 5 minutes, every kind at least once (a round has each once).
    assert kinds == {"gateway", "streams-a", "streams-b", "trainer", "pause", "broker"}, kinds
