"""The trained mix holds end to end: `forge-rl run` over two domains whose rollouts differ about
tenfold in length, against a broker this test starts; every sample the trainer could consume is
read back from forge.train, in order.

The long domain is the guess task with ten turns whose tool takes a second, as a sandbox's
would (a tiny model seldom finds the digit, so most episodes run all ten), the short one the
echo task (one call, no tool). The pipeline file asks for
30% guess and 70% echo. A fleet with agents split by share, or dispatching at random, would
train what finishes first; the gateway's mix (``gateway.call.domain_mix``) admits each domain at its
share of what is trained or held, so every 200 consecutive samples of forge.train, once warm,
are within 5 points of the shares.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from infra.config import InfraSettings
from infra.kafka_clients import Delivered
from infra.lifecycle import infra_up, local_broker
from infra.log_reader import LogRange, read_log
from schemas.records import TrainSample
from schemas.topics import TRAIN
from tests.integration.test_admission_staleness import run_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SHARES = {"guess": 0.3, "echo": 0.7}
WARM = 60
WIDTH = 200
UNTIL_POLICY = 33
"""33 steps of 8 = 264 samples, just over WARM + WIDTH. The run is bound by its 8 agents at about
1.5 samples/s (16 agents slow the engine: echo rollouts lengthen and the case is lost), so the
samples asked for set its length."""
RUN_TIMEOUT_S = 330
"""Inside the test's own limit, so a slow run fails with its output rather than killed."""


def write_config(home: Path) -> Path:
    pipeline = {"window": 8, "item_timeout_s": 150, "group_timeout_s": 120,
                "domains": {name: {"share": share} for name, share in SHARES.items()}}  # fmt: skip
    (home / "pipeline.yaml").write_text(yaml.safe_dump(pipeline))
    config = {
        "run": {"domains": {"guess": "guess", "echo": "echo"}, "agents": 8, "group_size": 2,
                "max_turns": 10, "tool_latency_s": 1.0, "duration_s": 300,
                "until_policy": UNTIL_POLICY},
        "gateway": {"max_batch_size": 16, "batch_wait_ms": 5},
        "trainer": {"batch_size": 8, "lr": 1.0e-3, "keep_policies": 4},
        "streams": {"pipeline_file": "pipeline.yaml", "lateness_s": 1.0, "idle_flush_s": 2.0},
    }  # fmt: skip
    path = home / "mix.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def trained_domains(bootstrap: str) -> tuple[list[str], dict[str, list[float]]]:
    """The domain of every sample on forge.train in order, and each domain's rollout lengths
    (seconds, start to end)."""
    domains, lengths = [], {}
    for delivered in read_log(bootstrap, TRAIN, LogRange()):
        if isinstance(delivered, Delivered) and isinstance(delivered.record, TrainSample):
            trajectory = delivered.record.trajectory
            domains.append(trajectory.domain)
            took = (trajectory.ended_ts - trajectory.started_ts).total_seconds()
            lengths.setdefault(trajectory.domain, []).append(took)
    return domains, lengths


@pytest.mark.timeout(360)
def test_every_window_of_trained_samples_meets_the_shares(tmp_path):
    config = write_config(tmp_path)
    infra = InfraSettings(home=tmp_path, kafka_bootstrap=None, kafka_port=0,
                          kafka_controller_port=0)  # fmt: skip
    bootstrap = infra_up(infra, with_analytics=False).bootstrap  # ours: the run leaves it up
    output = tmp_path / "run.out"
    try:
        cmd = [sys.executable, "-m", "forge_rl.cli", "--config", str(config), "run"]
        with output.open("w") as out:
            done = subprocess.run(cmd, env=run_env(tmp_path), stdout=out,
                                  stderr=subprocess.STDOUT, timeout=RUN_TIMEOUT_S)  # fmt: skip
        assert done.returncode == 0, output.read_text()[-5000:]
        domains, lengths = trained_domains(bootstrap)
    finally:
        local_broker(infra).down(purge=True)
    ratio = statistics.fmean(lengths["guess"]) / statistics.fmean(lengths["echo"])
    assert ratio >= 5, f"guess rollouts only {ratio:.1f}x as long as echo's: not the case tested"
    assert len(domains) >= WARM + WIDTH, f"only {len(domains)} samples trained"
    worst = 0.0
    for start in range(WARM, len(domains) - WIDTH + 1):
        counts = Counter(domains[start : start + WIDTH])
        worst = max(worst, *(abs(counts[d] / WIDTH - s) for d, s in SHARES.items()))
    share = Counter(domains[WARM:])["guess"] / len(domains[WARM:])
    print(
        f"mix: {len(domains)} samples, lengths {ratio:.1f}x, guess {share:.1%}, worst {worst:.1%}"
    )
    assert worst <= 0.05, (
        f"a window of {WIDTH} strays {worst:.1%} from the shares (guess {share:.1%} over "
        f"{len(domains) - WARM} warm samples; lengths {ratio:.1f}x)"
    )
