"""`forge-rl run --engine vllm`: the main job on a vLLM CPU server the run starts itself; a
trained policy reaches it by weights_path reload and tags later calls; nothing is left over."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest

from forge_rl.local_vllm import vllm_python
from tests.integration.test_main_job import assert_all_gone, forge, scalar
from tests.vllm_fixture import VLLM_MISSING

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.skipif(vllm_python() is None, reason=VLLM_MISSING),
]


def processes_of(home: Path) -> list[psutil.Process]:
    """Every process started with this FORGE_HOME: the run's services, vLLM's engine too."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("FORGE_HOME") == str(home):
                found.append(process)
        except psutil.Error:
            continue
    return found


def test_a_trained_policy_reaches_the_runs_vllm_server_and_it_is_stopped(tmp_path):
    run = forge(tmp_path, "run", "--fresh", "--engine", "vllm", "--until-policy", "1",
                "--duration", "120", timeout=280)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (summary_file,) = tmp_path.glob("runs/*/summary.json")
    summary = json.loads(summary_file.read_text())
    assert summary["engine"] == "vllm" and summary["served_version"] >= 1
    assert summary["learning"]["rollouts"] >= 8 and summary["learning"]["aborted"] == 0
    logs = summary_file.parent / "logs"
    assert "(vllm engine)" in (logs / "gateway.log").read_text()
    served = (logs / "vllm.log").read_text()
    assert '"POST /v1/completions HTTP/1.1" 200' in served
    assert '"POST /collective_rpc HTTP/1.1" 200' in served  # reload_weights(weights_path)
    later = "SELECT count() FROM calls WHERE policy_version >= 1"
    assert scalar(tmp_path, later) > 0, "no call was answered with a trained policy"
    assert "vllm (ok)" in run.stdout  # stopped with the services
    assert_all_gone(processes_of(tmp_path))
