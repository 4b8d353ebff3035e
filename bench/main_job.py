"""Does the agent get better, and how fast? `forge-rl run` N times from scratch per variant:
rollouts/s, engine seconds and task reward (all rollouts, first vs last 20%), per domain too.

Each run gets a fresh FORGE_HOME and its own broker on free ports, runs the config for its full
duration, and leaves `summary.json`; this prints every run's rollouts/s (over the agents' time,
start-up excluded), engine seconds (the cost ledger's), truncated rollouts and mean task reward
(± std over rollouts) of all, the first 20% and the last 20% of its rollouts, per domain, and
the spread of both fifths over the runs. Variants, each run index playing every variant in turn
with the same seed:
- `--engine both`: the embedded engine, then a local vLLM CPU server (`forge-rl run --engine
  vllm`; scripts/setup_vllm.sh builds its environment);
- `--truncation both`: the pipeline file as it is (off unless it enables it), then with early
  truncation on for every domain (`--negative-steps` in a row, `gateway.call.truncation`);
- `--ordering fifo window adaptive greedy`: the gateway's admission on (S = `--staleness`, P =
  the trainer's batch size) and the queue ordered by FIFO, the windowed FIFO at W = 0.3·(S+1)·P,
  the adaptive window capped at 0.5·(S+1)·P, or greedy dropping what is more than S versions
  behind; samples/s and staleness at consumption are printed beside rollouts/s;
- `--against COMMIT`: the same config path run from a git worktree of COMMIT (same Python
  environment) before each of this tree's variants: today's main job beside an older one's.
With two or more variants a side-by-side table follows. `--plot FILE` draws every variant's
reward curve per domain (a moving mean over rollouts in start order, the runs' mean ± spread).
Beside the task reward (truncated rollouts have none), the solved share of the first and last
20% counts a truncated rollout as unsolved, so truncation cannot flatter a variant.

    python bench/main_job.py [--runs 3] [--config examples/quickstart.yaml] [--duration S]
                             [--engine embedded|vllm|both] [--truncation off|on|both]
                             [--negative-steps 3] [--ordering fifo window adaptive greedy]
                             [--staleness 3] [--against COMMIT] [--plot FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import yaml
from rich.console import Console
from rich.table import Table

from infra.machine import machine_line

ROOT = Path(__file__).resolve().parents[1]
ENGINES = {"embedded": ["embedded"], "vllm": ["vllm"], "both": ["embedded", "vllm"]}
TRUNCATION = {"off": [False], "on": [True], "both": [False, True]}
ORDERINGS = ("fifo", "window", "adaptive", "greedy")


@dataclass(frozen=True)
class Variant:
    engine: str
    truncation: bool
    commit: str | None = None  # run from a worktree of this commit; None: this tree
    ordering: str | None = None  # one of ORDERINGS; None: the pipeline file's window

    @property
    def label(self) -> str:
        tree = f"{self.commit[:7]}: " if self.commit else ""
        ordering = f", {self.ordering}" if self.ordering else ""
        return f"{tree}{self.engine}{', truncation' if self.truncation else ''}{ordering}"


def worktree(commit: str) -> Path:
    """A detached checkout of ``commit`` beside this tree's, for `--against`."""
    path = Path(tempfile.mkdtemp(prefix="forge-bench-tree-"))
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(path),
                    commit], check=True, capture_output=True)  # fmt: skip
    return path


def truncating_pipeline(config: Path, negative_steps: int, out_dir: Path) -> Path:
    """The config's pipeline file with truncation on for every domain."""
    streams = (yaml.safe_load(config.read_text()) or {}).get("streams", {})
    source = config.parent / streams["pipeline_file"] if streams.get("pipeline_file") else None
    pipeline = yaml.safe_load(source.read_text()) if source else {}
    rule = {"enabled": True, "negative_steps": negative_steps}
    pipeline["truncation"] = rule
    for domain in (pipeline.get("domains") or {}).values():
        domain["truncation"] = rule
    path = out_dir / "pipeline-truncation.yaml"
    path.write_text(yaml.safe_dump(pipeline))
    return path


def ordering_env(config: Path, ordering: str, staleness: int, out_dir: Path) -> dict[str, str]:
    """The environment that runs ``config`` with admission on and the queue ordered so."""
    run_config = yaml.safe_load(config.read_text()) or {}
    streams = run_config.get("streams", {})
    source = config.parent / streams["pipeline_file"] if streams.get("pipeline_file") else None
    pipeline = (yaml.safe_load(source.read_text()) if source else None) or {}
    per_step = int(run_config["trainer"]["batch_size"])
    buffer = (staleness + 1) * per_step
    pipeline.pop("adaptive_window", None)
    pipeline.pop("max_staleness", None)
    if ordering == "fifo":
        pipeline["window"] = 1
    elif ordering == "window":
        pipeline["window"] = max(1, int(0.3 * buffer))
    elif ordering == "adaptive":
        pipeline["window"] = max(1, int(0.5 * buffer))
        pipeline["adaptive_window"] = {"samples_per_step": per_step}
    else:
        pipeline["window"], pipeline["max_staleness"] = None, staleness
    path = out_dir / f"pipeline-{ordering}.yaml"
    path.write_text(yaml.safe_dump(pipeline))
    return {"FORGE_STREAMS_PIPELINE_FILE": str(path),
            "FORGE_GATEWAY_ADMISSION_STALENESS_STEPS": str(staleness),
            "FORGE_GATEWAY_ADMISSION_SAMPLES_PER_STEP": str(per_step)}  # fmt: skip


def staleness_at_consumption(summary: dict) -> tuple[float, int]:
    """Mean and max policy versions between a trained rollout's policy and its consumption."""
    report = summary["reports"].get("staleness")
    if report is None:
        return float("nan"), -1
    rows = [(int(v), int(n)) for v, n in report["rows"] if v is not None and int(v) >= 0]
    total = sum(n for _, n in rows)
    if not total:
        return float("nan"), -1
    return sum(v * n for v, n in rows) / total, max(v for v, _ in rows)


def samples_per_s(summary: dict, config: Path) -> float:
    per_step = int((yaml.safe_load(config.read_text()) or {})["trainer"]["batch_size"])
    return float(summary["pipeline"]["steps"] * per_step / summary["agent_seconds"])


SERVICES = ("trainer", "gateway", "streams")
CPU_PARTS = ("agents", "trainer", "gateway", "streams", "kafka", "run (fleet, progress)", "other")


def service_of(process: psutil.Process) -> str:
    """Which part of a run a process is: a service, the broker, an agent, the run itself."""
    try:
        args = process.cmdline()
    except psutil.Error:
        return "other"
    line = " ".join(args)
    if "forkserver" in line or "envs." in line:
        return "agents"
    if args and args[0].endswith("java"):
        return "kafka"
    for service in SERVICES:
        if service in args:
            return service
    return "run (fleet, progress)" if "run" in args else "other"


class CpuSampler(threading.Thread):
    """CPU seconds of a run's process tree by part, sampled every ``every_s``: each process's
    own time at its last sample. Agents are forked by a fork server, which reaps them: they
    count through its children's time, not one by one (their last sample would miss the end)."""

    def __init__(self, root: int, every_s: float = 0.5) -> None:
        super().__init__(name="cpu-sampler", daemon=True)
        self.root, self.every_s = root, every_s
        self.last: dict[int, tuple[str, float]] = {}
        self.done = threading.Event()

    def run(self) -> None:
        try:
            top = psutil.Process(self.root)
        except psutil.Error:
            return
        while not self.done.is_set():
            try:
                tree = [top, *top.children(recursive=True)]
            except psutil.Error:
                break
            for process in tree:
                try:
                    part = self.last.get(process.pid, (service_of(process), 0.0))[0]
                    parent = process.parent()
                    if part == "agents" and parent is not None and service_of(parent) == "agents":
                        continue  # a forked agent: its fork server counts it once reaped
                    times = process.cpu_times()
                    own = times.user + times.system
                    if part == "agents":
                        own += times.children_user + times.children_system
                    self.last[process.pid] = (part, own)
                except psutil.Error:
                    continue
            self.done.wait(self.every_s)

    def totals(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for part, seconds in self.last.values():
            out[part] = out.get(part, 0.0) + seconds
        return out


def one_run(
    config: Path,
    duration: float | None,
    seed: int,
    variant: Variant,
    pipeline: Path | None,
    tree: Path = ROOT,
    ordering_vars: dict[str, str] | None = None,
) -> tuple[dict, float]:
    home = Path(tempfile.mkdtemp(prefix="forge-bench-run-"))
    env = {**os.environ, "FORGE_HOME": str(home), "FORGE_KAFKA_PORT": "0",
           "FORGE_KAFKA_CONTROLLER_PORT": "0", "FORGE_RUN_SEED": str(seed),
           "FORGE_TRAINER_SEED": str(seed), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(tree)}  # fmt: skip
    config = tree / config.resolve().relative_to(ROOT)
    if variant.truncation and pipeline is not None:
        env["FORGE_STREAMS_PIPELINE_FILE"] = str(pipeline)  # the gateway reads it there too
    env.update(ordering_vars or {})
    cmd = [sys.executable, "-m", "forge_rl.cli", "--config", str(config), "run", "--fresh",
           "--engine", variant.engine]  # fmt: skip
    if duration is not None:
        cmd += ["--duration", str(duration)]
    started = time.monotonic()
    runner = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, cwd=tree)
    sampler = CpuSampler(runner.pid)
    sampler.start()
    if runner.wait() != 0:
        raise subprocess.CalledProcessError(runner.returncode, cmd)
    sampler.done.set()
    sampler.join()
    wall = time.monotonic() - started
    (summary,) = home.glob("runs/*/summary.json")
    return {**json.loads(summary.read_text()), "cpu_s": sampler.totals()}, wall


def rollouts_per_s(summary: dict) -> float:
    return float(summary["learning"]["rollouts"] / summary["agent_seconds"])


def engine_seconds(summary: dict) -> float:
    """The cost ledger's engine seconds; NaN from a tree whose run kept no ledger."""
    costs = summary["reports"].get("costs")
    if costs is None:
        return float("nan")
    return float(dict(zip(costs["columns"], costs["rows"][0], strict=True))["engine_s"])


def reward(part: dict) -> str:
    return f"{part['mean']:+.3f} ± {part['std']:.3f}"


def spread(values: list[float]) -> float:
    if any(math.isnan(v) for v in values):
        return float("nan")
    return statistics.pstdev(values) if len(values) > 1 else 0.0


def solved_shares(summary: dict, part: str, fraction: float = 0.2) -> tuple[float, float]:
    """The solved share of the part's first and last fifth of ended rollouts in start order, a
    truncated one counting as unsolved: the task reward leaves truncated rollouts out (the
    agent never reports), which would flatter a variant that truncates its failures."""
    statuses = [e[2] for e in summary.get("episodes", []) if part in ("all", e[1])]
    ended = [status == "solved" for status in statuses if status != "aborted"]
    if not ended:
        return float("nan"), float("nan")
    k = max(1, round(len(ended) * fraction))
    return statistics.fmean(ended[:k]), statistics.fmean(ended[-k:])


def parts_of(summary: dict) -> dict[str, dict]:
    """The whole run's learning summary, then each domain's."""
    return {"all": summary["learning"], **summary.get("learning_by_domain", {})}


def side_by_side(console: Console, summaries: dict[Variant, list[dict]]) -> None:
    """Per variant, the runs' means (± spread over runs) of every figure."""
    table = Table("variant", "runs", "rollouts/s", "engine s", "truncated", "part", "first 20%",
                  "last 20%", "gain", "solved first", "solved last",
                  title="variants side by side (means over runs)")  # fmt: skip
    for variant, runs in summaries.items():
        speed = [rollouts_per_s(s) for s in runs]
        engine = [engine_seconds(s) for s in runs]
        truncated = [float(s.get("truncated", 0)) for s in runs]
        for i, part in enumerate(parts_of(runs[0])):
            firsts = [parts_of(s)[part]["first"]["mean"] for s in runs]
            lasts = [parts_of(s)[part]["last"]["mean"] for s in runs]
            gains = [parts_of(s)[part]["gain"] for s in runs]
            solved = [solved_shares(s, part) for s in runs]
            head = (
                [variant.label, str(len(runs)), f"{statistics.fmean(speed):.2f} ± "
                 f"{spread(speed):.2f}", f"{statistics.fmean(engine):.0f} ± {spread(engine):.0f}",
                 f"{statistics.fmean(truncated):.0f}"]
                if i == 0 else [""] * 5
            )  # fmt: skip
            table.add_row(*head, part, f"{statistics.fmean(firsts):+.3f} ± {spread(firsts):.3f}",
                          f"{statistics.fmean(lasts):+.3f} ± {spread(lasts):.3f}",
                          f"{statistics.fmean(gains):+.3f}",
                          f"{statistics.fmean(f for f, _ in solved):.1%}",
                          f"{statistics.fmean(last for _, last in solved):.1%}")  # fmt: skip
    console.print(table)


def moving_mean(values: list[float], width: int) -> list[float]:
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value - (values[i - width] if i >= width else 0.0)
        out.append(total / min(i + 1, width))
    return out


def plot(path: Path, summaries: dict[Variant, list[dict]], width: int = 50) -> None:
    """Per domain, each variant's reward curve over rollouts: the mean of its runs' moving
    means, shaded ± their spread, over the rollouts every run reached."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    domains = sorted(
        {e[1] for runs in summaries.values() for s in runs for e in s.get("episodes", [])}
    )
    if not domains:  # only trees whose summaries kept no episodes
        return
    fig, axes = plt.subplots(1, len(domains), figsize=(6 * len(domains), 4.5), squeeze=False)
    for ax, domain in zip(axes[0], domains, strict=True):
        for variant, runs in summaries.items():
            curves = []
            for s in runs:
                if "episodes" not in s:  # a summary from before episodes were kept
                    continue
                rewards = [e[3] for e in s["episodes"] if e[1] == domain and e[3] is not None]
                curves.append(moving_mean(rewards, width))
            n = min((len(c) for c in curves), default=0)
            if n == 0:
                continue
            mean = [statistics.fmean(c[i] for c in curves) for i in range(n)]
            dev = [spread([c[i] for c in curves]) for i in range(n)]
            line = ax.plot(range(n), mean, label=f"{variant.label} ({len(runs)} runs)")[0]
            ax.fill_between(range(n), [m - d for m, d in zip(mean, dev, strict=True)],
                            [m + d for m, d in zip(mean, dev, strict=True)],
                            color=line.get_color(), alpha=0.2)  # fmt: skip
        ax.set_title(f"domain {domain}")
        ax.set_xlabel("scored rollouts of the domain, in start order")
        ax.set_ylabel(f"task reward, moving mean of {width}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3, help="runs per variant")
    parser.add_argument("--config", type=Path, default=ROOT / "examples" / "quickstart.yaml")
    parser.add_argument("--duration", type=float, help="override run.duration_s")
    parser.add_argument(
        "--engine", choices=sorted(ENGINES), default="embedded",
        help="the gateway's engine; both: each run index on each, in turn",
    )  # fmt: skip
    parser.add_argument("--truncation", choices=sorted(TRUNCATION), default="off",
                        help="early truncation; both: each run without, then with")  # fmt: skip
    parser.add_argument("--negative-steps", type=int, default=3,
                        help="truncate after this many negative steps in a row")  # fmt: skip
    parser.add_argument("--ordering", nargs="+", choices=ORDERINGS,
                        help="each run once per queue ordering, admission on")  # fmt: skip
    parser.add_argument("--staleness", type=int, default=3, help="S for --ordering")
    parser.add_argument("--against", metavar="COMMIT",
                        help="also run the config from a worktree of this commit")  # fmt: skip
    parser.add_argument("--plot", type=Path, help="write the reward curves here (PNG)")
    args = parser.parse_args()
    print(machine_line(), flush=True)
    console = Console(width=180)
    orderings: list[str | None] = list(args.ordering or [None])
    variants = [Variant(e, t, ordering=o) for e in ENGINES[args.engine]
                for t in TRUNCATION[args.truncation] for o in orderings]  # fmt: skip
    if args.ordering and (args.truncation != "off" or args.against):
        parser.error("--ordering runs alone (no --truncation, no --against)")
    out_dir = Path(tempfile.mkdtemp(prefix="forge-bench-pipeline-"))
    ordering_vars = {
        o: ordering_env(args.config.resolve(), o, args.staleness, out_dir)
        for o in args.ordering or []
    }
    trees: dict[str | None, Path] = {None: ROOT}
    if args.against:
        variants = [Variant(e, False, args.against) for e in ENGINES[args.engine]] + variants
        trees[args.against] = worktree(args.against)
    pipeline = None
    if any(v.truncation for v in variants):
        pipeline = truncating_pipeline(args.config.resolve(), args.negative_steps, out_dir)
    table = Table("run", "variant", "wall s", "rollouts", "rollouts/s", "engine s", "steps",
                  "truncated", "part", "reward (all)", "first 20%", "last 20%", "gain")  # fmt: skip
    summaries: dict[Variant, list[dict]] = {v: [] for v in variants}
    for i in range(args.runs):
        for variant in variants:
            with console.status(f"run {i + 1} of {args.runs}, {variant.label}…"):
                summary, wall = one_run(args.config, args.duration, i, variant, pipeline,
                                        trees[variant.commit],
                                        ordering_vars.get(variant.ordering or ""))  # fmt: skip
            summaries[variant].append(summary)
            for k, (part, learning) in enumerate(parts_of(summary).items()):
                head = (
                    [str(i + 1), variant.label, f"{wall:.0f}", str(learning["rollouts"]),
                     f"{rollouts_per_s(summary):.2f}", f"{engine_seconds(summary):.0f}",
                     str(summary["pipeline"]["steps"]), str(summary.get("truncated", 0))]
                    if k == 0 else [""] * 8
                )  # fmt: skip
                table.add_row(*head, part, reward(learning["overall"]), reward(learning["first"]),
                              reward(learning["last"]), f"{learning['gain']:+.3f}")  # fmt: skip
    console.print(table)
    for commit, tree in trees.items():
        if commit is not None:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)])
    for variant, runs in summaries.items():
        firsts = [s["learning"]["first"]["mean"] for s in runs]
        lasts = [s["learning"]["last"]["mean"] for s in runs]
        console.print(
            f"{variant.label}, over {args.runs} runs: first 20% {statistics.fmean(firsts):+.3f} "
            f"± {spread(firsts):.3f} (min {min(firsts):+.3f}, max {max(firsts):+.3f}); last 20% "
            f"{statistics.fmean(lasts):+.3f} ± {spread(lasts):.3f} (min {min(lasts):+.3f}, "
            f"max {max(lasts):+.3f})"
        )
    cpu = Table("run", "variant", "wall s", *(f"{p} cpu-s" for p in CPU_PARTS), "sum",
                title="CPU seconds by part of the run (2 cores: at most 2 x wall)")  # fmt: skip
    for variant, runs in summaries.items():
        for i, s in enumerate(runs):
            parts = s["cpu_s"]
            cpu.add_row(str(i + 1), variant.label, f"{s['seconds']:.0f}",
                        *(f"{parts.get(p, 0.0):.0f}" for p in CPU_PARTS),
                        f"{sum(parts.values()):.0f}")  # fmt: skip
    console.print(cpu)
    if len(summaries) > 1:
        side_by_side(console, summaries)
    if args.ordering:
        flow = Table("variant", "rollouts/s", "samples/s", "staleness mean", "staleness max",
                     title="orderings: mean ± spread over runs")  # fmt: skip
        for variant, runs in summaries.items():
            speed = [rollouts_per_s(s) for s in runs]
            samples = [samples_per_s(s, args.config) for s in runs]
            stale = [staleness_at_consumption(s) for s in runs]
            means = [m for m, _ in stale]
            flow.add_row(variant.label, f"{statistics.fmean(speed):.2f} ± {spread(speed):.2f}",
                         f"{statistics.fmean(samples):.2f} ± {spread(samples):.2f}",
                         f"{statistics.fmean(means):.2f} ± {spread(means):.2f}",
                         str(max(m for _, m in stale)))  # fmt: skip
        console.print(flow)
    if args.plot is not None:
        plot(args.plot, summaries)
        console.print(f"reward curves: {args.plot}")


if __name__ == "__main__":
    main()
