"""Windowed FIFO vs FIFO vs greedy: a discrete-event simulation of Forge's generation queue.

N slots generate continuously. With --free-on consume (default) a slot is freed when its item
is consumed (emitted or dropped), so completed items waiting behind a slow head hold their
slot (bounded memory) — that is what makes strict FIFO slow; with --free-on complete a slot
frees when its item completes and finished items wait in an unbounded buffer. Durations are
heavy-tailed (lognormal or Pareto); the trainer takes a step
(one policy version) every --batch consumed items. Items older than --timeout x the median
duration are resolved as dropped. Reported per W, over the same horizon and seed:
throughput relative to greedy, length bias (mean duration consumed / population mean) and
staleness (policy versions between an item's start and its consumption).

    python bench/windowed_fifo.py [--inflight 256] [--horizon 200]
"""

from __future__ import annotations

import argparse
import heapq
import statistics
import sys
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

# bench/streams.py shares its name with the `streams` package: keep bench/ off the import path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

from infra.machine import machine_line  # noqa: E402
from streams.windowed_fifo import Dropped, Emitted, WindowedFifo  # noqa: E402


def durations(kind: str, rng: np.random.Generator, n: int) -> np.ndarray:
    if kind == "lognormal":
        return rng.lognormal(mean=0.0, sigma=1.0, size=n)
    return (rng.pareto(1.5, size=n) + 1.0) * 0.4  # Pareto(alpha=1.5), median ~0.63


def simulate(kind: str, window: int | None, inflight: int, horizon: float, batch: int,
             timeout: float, seed: int, free_on: str) -> dict[str, float]:  # fmt: skip
    rng = np.random.default_rng(seed)
    pool = durations(kind, rng, 2_000_000)
    fifo: WindowedFifo[float] = WindowedFifo(window, timeout_s=timeout)
    events: list[tuple[float, int, int]] = []  # (time, kind 0=complete 1=timeout, index)
    started: dict[int, tuple[float, int]] = {}
    next_index, version, consumed_since_step = 0, 0, 0
    consumed_durations: list[float] = []
    population: list[float] = []
    staleness: list[int] = []

    def start(now: float) -> None:
        nonlocal next_index
        d = float(pool[next_index])
        fifo.enqueue(next_index, now)
        started[next_index] = (d, version)
        population.append(d)
        heapq.heappush(events, (now + d, 0, next_index))
        heapq.heappush(events, (now + timeout + 1e-9, 1, next_index))
        next_index += 1

    for _ in range(inflight):
        start(0.0)
    while events and events[0][0] <= horizon:
        now, kind_, index = heapq.heappop(events)
        if kind_ == 0:
            duration, start_version = started[index]
            fifo.complete(index, duration, start_version)
            if free_on == "complete":
                start(now)
        for out in fifo.poll(now, version):
            if isinstance(out, Emitted):
                consumed_durations.append(out.item)
                staleness.append(out.staleness)
                consumed_since_step += 1
                if consumed_since_step == batch:
                    version, consumed_since_step = version + 1, 0
            else:
                assert isinstance(out, Dropped)
            if free_on == "consume" or isinstance(out, Dropped):
                start(now)
    return {
        "throughput": len(consumed_durations) / horizon,
        "bias": statistics.fmean(consumed_durations) / statistics.fmean(population),
        "stale_mean": statistics.fmean(staleness) if staleness else 0.0,
        "stale_max": max(staleness, default=0),
        "dropped": fifo.stats.dropped_timeout,
        "consumed": len(consumed_durations),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--inflight", type=int, default=256, help="N: items generating at once")
    parser.add_argument("--horizon", type=float, default=200.0, help="simulated time units")
    parser.add_argument("--batch", type=int, default=64, help="consumed items per policy version")
    parser.add_argument("--timeout", type=float, default=20.0, help="x median duration")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--free-on", choices=["consume", "complete"], default="consume",
        help="when a generation slot frees: once its item is consumed (completed items waiting "
        "behind the head hold memory and a slot) or as soon as it completes (unbounded buffer)",
    )  # fmt: skip
    args = parser.parse_args()
    print(machine_line(), flush=True)
    n = args.inflight
    windows: list[tuple[str, int | None]] = [
        ("1 (FIFO)", 1), ("0.1N", max(1, n // 10)), ("0.3N", int(0.3 * n)), ("0.5N", n // 2),
        ("inf (greedy)", None),
    ]  # fmt: skip
    console = Console(width=160)
    for kind in ("lognormal", "pareto"):
        median = float(np.median(durations(kind, np.random.default_rng(1), 100_000)))
        rows = {
            label: simulate(
                kind, w, n, args.horizon, args.batch, args.timeout * median, args.seed, args.free_on
            )
            for label, w in windows
        }
        greedy = rows["inf (greedy)"]["throughput"]
        title = f"{kind} durations, N={n}, slots free on {args.free_on}"
        table = Table("W", "consumed", "throughput vs greedy", "length bias", "staleness mean",
                      "staleness max", "timed out", title=title)  # fmt: skip
        for label, r in rows.items():
            table.add_row(
                label, str(r["consumed"]), f"{r['throughput'] / greedy:.3f}", f"{r['bias']:.3f}",
                f"{r['stale_mean']:.2f}", str(r["stale_max"]), str(r["dropped"]),
            )  # fmt: skip
        console.print(table)


if __name__ == "__main__":
    main()
