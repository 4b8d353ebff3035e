"""Windowed FIFO against FIFO and greedy at the same staleness bound S: a discrete-event
simulation driven by the project's admission, sequencer and adaptive-window code
(bench/fifolib/fifo_simulation.py says what is modelled).

Per scale (N engine slots, S = 3 and P = N/(S+1) samples a step, so the active buffer
(S+1)·P = N),
per duration law (lognormal sigma=1, Pareto alpha=1.5, bimodal: one in ten twenty times longer) and
per trainer pace (step time over the time the engine takes to generate P; < 1: the trainer is
faster than generation), each ordering runs for the same number of trainer steps:
FIFO (W=1), windowed W = f·B for f in 0.1, 0.3, 0.5, the adaptive window capped at 0.5·B,
f=0.3 with admission freeing room only at the trainer's head (as before issue 40), and greedy
(W=∞, the same admission) whose trainer drops what is more than S versions behind.
Printed per run: trainer utilisation, samples trained per mean duration, mean wait for a train
batch, staleness mean and max (at the step that trains it), length bias (mean duration trained
/ mean duration started) and completed work dropped; `--plot` draws utilisation and length
bias against pace.

    python bench/windowed_fifo.py [--scale small forge] [--pace 0.5 1 2 4 8] [--steps 40]
                                  [--plot bench/windowed_fifo.png]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
# bench/streams.py shares its name with the `streams` package: keep bench/ off the import path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.append(str(HERE / "fifolib"))

from fifo_simulation import Ordering, Outcome, Scenario, simulate  # noqa: E402

from infra.machine import machine_line  # noqa: E402

SCALES = {"small": 256, "forge": 8192}
LAWS = ("lognormal", "pareto", "bimodal")


def orderings(buffer: int, staleness: int) -> list[Ordering]:
    return [
        Ordering("FIFO", 1),
        *(Ordering(f"f={f}", max(1, int(f * buffer))) for f in (0.1, 0.3, 0.5)),
        Ordering("adaptive", max(1, int(0.5 * buffer)), adaptive=True),
        Ordering("f=0.3 head only", max(1, int(0.3 * buffer)), head_only=True),
        Ordering("greedy+drop", None, max_staleness=staleness),
    ]


def run_all(args: argparse.Namespace) -> dict[tuple[str, str, float, str], Outcome]:
    results = {}
    console = Console(width=200)
    for scale in args.scale:
        n = SCALES[scale]
        for law in LAWS:
            for pace in args.pace:
                s = args.staleness
                p = n // (s + 1)
                scenario = Scenario(law, n, p, s, pace, reload_lag=args.reload_lag,
                                    steps=args.steps, seed=args.seed)  # fmt: skip
                table = Table("ordering", "utilisation", "vs greedy", "samples/t", "batch wait",
                              "stale mean", "stale max", "length bias", "vs greedy",
                              "dropped", "timed out", "mean W", "run s",
                              title=f"{scale} N={n} P={p} S={s}, {law}, pace {pace}")  # fmt: skip
                rows = {}
                for ordering in orderings(scenario.active_buffer, s):
                    began = time.perf_counter()
                    rows[ordering.label] = (
                        simulate(scenario, ordering),
                        time.perf_counter() - began,
                    )
                greedy = rows["greedy+drop"][0]
                for label, (r, took) in rows.items():
                    results[(scale, law, pace, label)] = r
                    table.add_row(
                        label, f"{r.utilisation:.3f}", f"{r.utilisation / greedy.utilisation:.2f}",
                        f"{r.samples_per_time:.1f}", f"{r.batch_wait:.3f}",
                        f"{r.staleness_mean:.2f}", str(r.staleness_max), f"{r.length_bias:.3f}",
                        f"{(1 - r.length_bias) / max(1e-9, 1 - greedy.length_bias):.2f}",
                        f"{r.dropped_stale}/{r.completed}", str(r.timed_out),
                        f"{r.mean_window:.0f}", f"{took:.1f}",
                    )  # fmt: skip
                console.print(table)
    return results


def plot(results: dict[tuple[str, str, float, str], Outcome], args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    labels = [o.label for o in orderings(4, 0)]
    fig, axes = plt.subplots(2 * len(args.scale), len(LAWS), figsize=(15, 6.5 * len(args.scale)),
                             squeeze=False)  # fmt: skip
    for row, scale in enumerate(args.scale):
        for col, law in enumerate(LAWS):
            top, bottom = axes[2 * row][col], axes[2 * row + 1][col]
            for label in labels:
                points = [results[(scale, law, p, label)] for p in args.pace]
                style = "--" if label == "greedy+drop" else "-"
                top.plot(args.pace, [r.utilisation for r in points], style, marker="o", label=label)
                bottom.plot(args.pace, [1 - r.length_bias for r in points], style, marker="o",
                            label=label)  # fmt: skip
            top.set_title(f"{scale} (N={SCALES[scale]}), {law}")
            top.set_ylabel("trainer utilisation")
            bottom.set_ylabel("length bias: 1 - trained/started mean duration")
            for ax in (top, bottom):
                ax.set_xscale("log", base=2)
                ax.set_xlabel("trainer pace (step time / generation time of P)")
                ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.plot, dpi=90)
    print(f"plot: {args.plot}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", nargs="+", choices=list(SCALES), default=list(SCALES))
    parser.add_argument("--pace", nargs="+", type=float, default=[0.5, 1.0, 2.0, 4.0, 8.0])
    parser.add_argument("--steps", type=int, default=40, help="trainer steps a run")
    parser.add_argument("--staleness", type=int, default=3,
                        help="S; P = N/(S+1), so the active buffer (S+1)·P is N")  # fmt: skip
    parser.add_argument("--reload-lag", type=float, default=0.05, help="in mean durations")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", type=Path, default=None, help="PNG of utilisation and bias")
    args = parser.parse_args()
    print(machine_line(), flush=True)
    results = run_all(args)
    if args.plot is not None:
        plot(results, args)


if __name__ == "__main__":
    main()
