"""Does the agent get better? `forge-rl run` N times from scratch, reward of first vs last 20%.

Each run gets a fresh FORGE_HOME and its own broker on free ports, runs the quickstart config
for its full duration, and leaves `summary.json`; this prints every run's first-20% and
last-20% mean task reward (± std over rollouts) and the spread of both over the runs.

    python bench/main_job.py [--runs 3] [--config examples/quickstart.yaml] [--duration S]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]


def one_run(config: Path, duration: float | None, seed: int) -> tuple[dict, float]:
    home = Path(tempfile.mkdtemp(prefix="forge-bench-run-"))
    env = {**os.environ, "FORGE_HOME": str(home), "FORGE_KAFKA_PORT": "0",
           "FORGE_KAFKA_CONTROLLER_PORT": "0", "FORGE_RUN_SEED": str(seed),
           "FORGE_TRAINER_SEED": str(seed), "HF_HUB_OFFLINE": "1"}  # fmt: skip
    cmd = [sys.executable, "-m", "forge_rl.cli", "--config", str(config), "run", "--fresh"]
    if duration is not None:
        cmd += ["--duration", str(duration)]
    started = time.monotonic()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.monotonic() - started
    (summary,) = home.glob("runs/*/summary.json")
    return json.loads(summary.read_text()), wall


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--config", type=Path, default=ROOT / "examples" / "quickstart.yaml")
    parser.add_argument("--duration", type=float, help="override run.duration_s")
    args = parser.parse_args()
    console = Console(width=140)
    table = Table("run", "wall s", "rollouts", "steps", "first 20%", "last 20%", "gain")
    firsts, lasts = [], []
    for i in range(args.runs):
        with console.status(f"run {i + 1} of {args.runs}…"):
            summary, wall = one_run(args.config, args.duration, seed=i)
        learning = summary["learning"]
        first, last = learning["first"], learning["last"]
        firsts.append(first["mean"])
        lasts.append(last["mean"])
        table.add_row(
            str(i + 1), f"{wall:.0f}", str(learning["rollouts"]),
            str(summary["pipeline"]["steps"]),
            f"{first['mean']:+.3f} ± {first['std']:.3f}",
            f"{last['mean']:+.3f} ± {last['std']:.3f}",
            f"{learning['gain']:+.3f}",
        )  # fmt: skip
    console.print(table)
    spread = statistics.pstdev if len(firsts) > 1 else (lambda _: 0.0)
    console.print(
        f"over {args.runs} runs: first 20% {statistics.fmean(firsts):+.3f} ± {spread(firsts):.3f}"
        f" (min {min(firsts):+.3f}, max {max(firsts):+.3f}); last 20% "
        f"{statistics.fmean(lasts):+.3f} ± {spread(lasts):.3f} (min {min(lasts):+.3f}, "
        f"max {max(lasts):+.3f})"
    )


if __name__ == "__main__":
    main()
