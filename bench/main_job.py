"""Does the agent get better, and how fast does each engine play? `forge-rl run` N times from
scratch per engine: rollouts/s and task reward (all rollouts, first vs last 20%).

Each run gets a fresh FORGE_HOME and its own broker on free ports, runs the quickstart config
for its full duration, and leaves `summary.json`; this prints every run's rollouts/s (over the
agents' time, start-up excluded) and mean task reward (± std over rollouts) of all, the first
20% and the last 20% of its rollouts, and the spread of both fifths over the runs. With
`--engine both`, each run index plays the embedded engine and then a local vLLM CPU server
(`forge-rl run --engine vllm`; scripts/setup_vllm.sh builds its environment) with the same seed,
and a side-by-side table with the vLLM/embedded ratio follows.

    python bench/main_job.py [--runs 3] [--config examples/quickstart.yaml] [--duration S]
                             [--engine embedded|vllm|both]
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
ENGINES = {"embedded": ["embedded"], "vllm": ["vllm"], "both": ["embedded", "vllm"]}


def one_run(config: Path, duration: float | None, seed: int, engine: str) -> tuple[dict, float]:
    home = Path(tempfile.mkdtemp(prefix="forge-bench-run-"))
    env = {**os.environ, "FORGE_HOME": str(home), "FORGE_KAFKA_PORT": "0",
           "FORGE_KAFKA_CONTROLLER_PORT": "0", "FORGE_RUN_SEED": str(seed),
           "FORGE_TRAINER_SEED": str(seed), "HF_HUB_OFFLINE": "1"}  # fmt: skip
    cmd = [sys.executable, "-m", "forge_rl.cli", "--config", str(config), "run", "--fresh",
           "--engine", engine]  # fmt: skip
    if duration is not None:
        cmd += ["--duration", str(duration)]
    started = time.monotonic()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.monotonic() - started
    (summary,) = home.glob("runs/*/summary.json")
    return json.loads(summary.read_text()), wall


def rollouts_per_s(summary: dict) -> float:
    return float(summary["learning"]["rollouts"] / summary["agent_seconds"])


def reward(part: dict) -> str:
    return f"{part['mean']:+.3f} ± {part['std']:.3f}"


def spread(values: list[float]) -> float:
    return statistics.pstdev(values) if len(values) > 1 else 0.0


def side_by_side(console: Console, summaries: dict[str, list[dict]]) -> None:
    """Per engine, the runs' mean rollouts/s and rewards; then vLLM over embedded."""
    table = Table("engine", "runs", "rollouts/s", "steps/s", "reward (all)", "first 20%",
                  "last 20%", title="embedded vs vLLM (means over runs)")  # fmt: skip
    means: dict[str, dict[str, float]] = {}
    for engine, runs in summaries.items():
        speed = [rollouts_per_s(s) for s in runs]
        steps = [s["pipeline"]["steps"] / s["agent_seconds"] for s in runs]
        parts = {p: [s["learning"][p]["mean"] for s in runs] for p in ("overall", "first", "last")}
        means[engine] = {"speed": statistics.fmean(speed), **{
            p: statistics.fmean(v) for p, v in parts.items()}}  # fmt: skip
        table.add_row(
            engine, str(len(runs)), f"{means[engine]['speed']:.2f} ± {spread(speed):.2f}",
            f"{statistics.fmean(steps):.3f}",
            *(f"{means[engine][p]:+.3f} ± {spread(v):.3f}" for p, v in parts.items()),
        )  # fmt: skip
    console.print(table)
    embedded, vllm = means["embedded"], means["vllm"]
    console.print(
        f"vLLM / embedded: rollouts/s {vllm['speed'] / embedded['speed']:.2f}x; reward (all) "
        f"{vllm['overall'] - embedded['overall']:+.3f}, last 20% "
        f"{vllm['last'] - embedded['last']:+.3f} (vLLM minus embedded)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3, help="runs per engine")
    parser.add_argument("--config", type=Path, default=ROOT / "examples" / "quickstart.yaml")
    parser.add_argument("--duration", type=float, help="override run.duration_s")
    parser.add_argument(
        "--engine", choices=sorted(ENGINES), default="embedded",
        help="the gateway's engine; both: each run index on each, in turn",
    )  # fmt: skip
    args = parser.parse_args()
    console = Console(width=160)
    table = Table("run", "engine", "wall s", "rollouts", "rollouts/s", "steps", "reward (all)",
                  "first 20%", "last 20%", "gain")  # fmt: skip
    summaries: dict[str, list[dict]] = {engine: [] for engine in ENGINES[args.engine]}
    for i in range(args.runs):
        for engine in summaries:
            with console.status(f"run {i + 1} of {args.runs}, {engine} engine…"):
                summary, wall = one_run(args.config, args.duration, seed=i, engine=engine)
            summaries[engine].append(summary)
            learning = summary["learning"]
            table.add_row(
                str(i + 1), engine, f"{wall:.0f}", str(learning["rollouts"]),
                f"{rollouts_per_s(summary):.2f}", str(summary["pipeline"]["steps"]),
                reward(learning["overall"]), reward(learning["first"]), reward(learning["last"]),
                f"{learning['gain']:+.3f}",
            )  # fmt: skip
    console.print(table)
    for engine, runs in summaries.items():
        firsts = [s["learning"]["first"]["mean"] for s in runs]
        lasts = [s["learning"]["last"]["mean"] for s in runs]
        console.print(
            f"{engine}, over {args.runs} runs: first 20% {statistics.fmean(firsts):+.3f} ± "
            f"{spread(firsts):.3f} (min {min(firsts):+.3f}, max {max(firsts):+.3f}); last 20% "
            f"{statistics.fmean(lasts):+.3f} ± {spread(lasts):.3f} (min {min(lasts):+.3f}, "
            f"max {max(lasts):+.3f})"
        )
    if len(summaries) == 2:
        side_by_side(console, summaries)


if __name__ == "__main__":
    main()
