"""`forge-rl report`: PNG pictures of a run and one HTML page showing them.

``render_report`` is the whole report from the answers to ``report_data.report_queries``: it
neither opens the store nor knows where the answers came from (the CLI asks the store or the
streams worker; ``forge-rl run`` asks its worker). Every picture is always written — one with
no rows says so on its canvas — so the page never points at a missing file.

matplotlib is driven through its object API on the Agg canvas: no pyplot, no global backend.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from forge_rl.report_data import (
    PHASES,
    REWARD_WINDOW,
    Frame,
    Span,
    frames,
    per_minute,
    report_queries,
)

PAGE = "index.html"

Answers = Sequence[tuple[Sequence[str], Sequence[Sequence[Any]]]]
Ask = Callable[[list[tuple[str, str]]], Answers]
"""Runs (title, sql) queries in order, answering (columns, rows) for each."""


@dataclass(frozen=True)
class Picture:
    file: str
    title: str
    caption: str
    draw: Callable[[Figure, dict[str, Frame]], None]


def _no_data(ax: Axes, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what} in this span", ha="center", va="center",
            transform=ax.transAxes, color="grey")  # fmt: skip
    ax.set_xticks([])
    ax.set_yticks([])


def _raw_and_moving(ax: Axes, frame: Frame, column: str, label: str, color: str) -> None:
    """Each rollout's own value faint, the moving mean over rollouts drawn over it."""
    x = frame.col("x")
    ax.scatter(x, frame.col("total_reward"), s=4, alpha=0.15, color=color, linewidths=0)
    ax.plot(x, frame.col(column), color=color, lw=1.6, label=label)


def draw_rewards(fig: Figure, data: dict[str, Frame]) -> None:
    frame = data["rewards"]
    ax = fig.add_subplot()
    if not frame:
        _no_data(ax, "rollouts")
        return
    _raw_and_moving(ax, frame, "mean_reward", "reward (moving mean)", "tab:blue")
    ax.set_xlabel("policy version that generated the rollout")
    ax.set_ylabel("reward per rollout")
    share = ax.twinx()
    x = frame.col("x")
    share.plot(x, frame.col("solved_share"), color="tab:green", label="solved share")
    share.plot(x, frame.col("aborted_share"), ls=":", color="tab:red", label="aborted share")
    share.set_ylim(-0.02, 1.02)
    share.set_ylabel("share of rollouts (moving)")
    lines = ax.get_legend_handles_labels()[0] + share.get_legend_handles_labels()[0]
    ax.legend(lines, [str(line.get_label()) for line in lines], loc="best", fontsize=8)
    ax.grid(alpha=0.3)


def draw_domains(fig: Figure, data: dict[str, Frame]) -> None:
    """Each domain's reward by policy version (moving mean over its rollouts, raw faint), and
    its share of what was trained."""
    frame, trained = data["domain_rewards"], data["domain_trained"]
    rewards, shares = fig.subplots(1, 2)
    if not frame:
        _no_data(rewards, "rollouts")
        _no_data(shares, "rollouts")
        return
    colors = iter(("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"))
    for name, part in frame.by("domain").items():
        _raw_and_moving(rewards, part, "mean_reward", name, next(colors, "tab:gray"))
    rewards.set_xlabel("policy version that generated the rollout")
    rewards.set_ylabel("reward per rollout (moving mean)")
    rewards.legend(fontsize=8)
    rewards.grid(alpha=0.3)
    parts = trained.by("domain")
    total = sum(trained.col("trained")) or 1.0
    names = list(parts)
    shares.bar(names, [sum(parts[n].col("trained")) / total for n in names], color="tab:blue")
    shares.set_ylabel("share of trained samples")
    shares.set_ylim(0, 1)
    shares.grid(alpha=0.3, axis="y")


def draw_staleness(fig: Figure, data: dict[str, Frame]) -> None:
    hist, per_step = fig.subplots(1, 2)
    frame = data["staleness"]
    if frame:
        hist.bar(frame.col("staleness"), frame.col("rollouts"), color="tab:purple")
        hist.set_xlabel("versions behind when sequenced (-1: not sequenced)")
        hist.set_ylabel("rollouts")
        hist.set_title("per rollout, when sequenced into forge.train", fontsize=10)
    else:
        _no_data(hist, "rollouts")
    steps = data["steps"]
    if steps:
        x = steps.col("step")
        per_step.plot(x, steps.col("staleness_mean"), label="mean")
        per_step.plot(x, steps.col("staleness_max"), ls="--", label="max")
        per_step.set_xlabel("train step")
        per_step.set_ylabel("versions behind when trained")
        per_step.set_title("per batch, when trained: mean and max", fontsize=10)
        per_step.legend(fontsize=8)
        per_step.grid(alpha=0.3)
    else:
        _no_data(per_step, "training steps")


def draw_cost(fig: Figure, data: dict[str, Frame]) -> None:
    rate, total = fig.subplots(2, 1, sharex=True)
    ledger = data["costs"]
    if not ledger:
        _no_data(rate, "cost ledger rows")
        _no_data(total, "cost ledger rows")
        return
    t = ledger.col("t")
    minutes = [(v - t[0]) / 60 for v in t]
    bucket = ledger.col("bucket_s")[0]
    series = (
        ("engine_s", "sampling (engine)"),
        ("update_s", "training (updates)"),
        ("credit_s", "credit assignment (scoring)"),
        ("agent_s", "agents (outside calls)"),
    )
    for column, label in series:
        rate.plot(minutes, [v / bucket for v in ledger.col(column)], marker=".", ms=3,
                  ls=":" if column == "agent_s" else "-", label=label)  # fmt: skip
    rate.set_ylabel("busy seconds per second")
    rate.legend(fontsize=7, ncol=2)
    rate.grid(alpha=0.3)
    for column, label in (*series[:3], ("cost_s", "cost C = max(sampling, training) + credit")):
        cost = column == "cost_s"
        style = {"color": "black", "ls": "--", "lw": 1.5} if cost else {"lw": 2.5}
        total.plot(minutes, _cumsum(ledger.col(column)), label=label, **style)
    total.set_ylabel("seconds, cumulative")
    total.set_xlabel("minutes since the first bucket")
    total.legend(fontsize=7)
    total.grid(alpha=0.3)


def draw_trainer_time(fig: Figure, data: dict[str, Frame]) -> None:
    now, total = fig.subplots(2, 1, sharex=True)
    steps = data["steps"]
    if not steps:
        _no_data(now, "training steps")
        _no_data(total, "training steps")
        return
    x = steps.col("step")
    split = [[0.0 if math.isnan(v) else v for v in steps.col(p)] for p in PHASES]
    labels = [p.removesuffix("_s").replace("_", " ") for p in PHASES]
    now.stackplot(x, split, labels=labels, alpha=0.85)
    now.plot(x, steps.col("step_time_s"), color="black", ls="--", lw=1, label="step_time_s")
    now.set_ylabel("seconds per step")
    now.legend(fontsize=7, ncol=4, loc="upper left")
    now.grid(alpha=0.3)
    cumulative = [_cumsum(phase) for phase in split]
    total.stackplot(x, [[v / 60 for v in c] for c in cumulative], alpha=0.85)
    total.set_ylabel("trainer minutes, cumulative")
    total.set_xlabel("train step")
    total.grid(alpha=0.3)


def _cumsum(values: list[float]) -> list[float]:
    out, running = [], 0.0
    for v in values:
        running += v
        out.append(running)
    return out


def draw_kl(fig: Figure, data: dict[str, Frame]) -> None:
    kl, ratio = fig.subplots(2, 1, sharex=True)
    steps = data["steps"]
    if not steps:
        _no_data(kl, "training steps")
        _no_data(ratio, "training steps")
        return
    x = steps.col("step")
    kl.plot(x, steps.col("kl_mean"), label="KL mean (k3)")
    kl.plot(x, steps.col("kl_max"), ls="--", label="KL max")
    kl.set_ylabel("KL(behaviour ‖ current)")
    if max((v for v in steps.col("kl_max") if v > 0), default=0.0) > 0:
        kl.set_yscale("symlog", linthresh=1e-4)
    kl.legend(fontsize=8)
    kl.grid(alpha=0.3)
    mean, std = steps.col("ratio_mean"), steps.col("ratio_std")
    ratio.plot(x, mean, label="ratio mean")
    ratio.fill_between(x, [m - s for m, s in zip(mean, std, strict=True)],
                       [m + s for m, s in zip(mean, std, strict=True)], alpha=0.25,
                       label="± std")  # fmt: skip
    ratio.plot(x, steps.col("ratio_max"), ls="--", label="ratio max")
    ratio.axhline(1.0, color="grey", lw=0.8)
    ratio.set_ylabel("importance weight π_θ/π_old")
    ratio.set_xlabel("train step")
    clip = ratio.twinx()
    clip.plot(x, steps.col("clip_fraction"), color="tab:red", lw=0.8, label="clip fraction")
    clip.set_ylim(-0.02, 1.02)
    clip.set_ylabel("clip fraction")
    lines = ratio.get_legend_handles_labels()[0] + clip.get_legend_handles_labels()[0]
    ratio.legend(lines, [str(line.get_label()) for line in lines], fontsize=8, loc="upper left")
    ratio.grid(alpha=0.3)


def draw_throughput(fig: Figure, data: dict[str, Frame]) -> None:
    ax = fig.add_subplot()
    rollouts, samples = data["rollout_rate"], data["sample_rate"]
    if not rollouts and not samples:
        _no_data(ax, "rollouts or training steps")
        return
    start = min(f.col("t")[0] for f in (rollouts, samples) if f)
    for frame, label in ((rollouts, "rollouts / min"), (samples, "trained samples / min")):
        if not frame:
            continue
        times = frame.col("t")
        minutes, rates = per_minute([start, *times], [0.0, *frame.col("n")])
        ax.plot(minutes, rates, marker=".", ms=3, label=label)
    ax.set_xlabel("minutes since the first rollout or step")
    ax.set_ylabel("per minute")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)


PICTURES: tuple[Picture, ...] = (
    Picture("rewards.png", "Reward and solved share by policy version",
            f"Each rollout's task reward (faint points) by the policy version that generated "
            f"it — rollouts of one version spread across it in the order they ended — and the "
            f"moving mean over the last {REWARD_WINDOW} rollouts (line, left axis); the moving "
            f"shares solved (outcome reward > 0, among rollouts with an outcome) and aborted "
            f"(right axis).", draw_rewards),
    Picture("staleness.png", "Staleness",
            "Two measures, one per panel. Left, per rollout, when the sequencer emitted it "
            "into forge.train: the newest policy version it had seen minus the oldest version "
            "among the rollout's calls (-1: not sequenced). Right, per training batch, when "
            "the trainer took it: the version being trained minus each sample's oldest call's "
            "version, mean and max over the batch — larger, by the time a sample waits in "
            "forge.train.", draw_staleness),
    Picture("cost.png", "Cost over time (the cost ledger)",
            "The cost ledger (forge-rl analytics costs) per time bucket. Top: seconds "
            "busy per second of the run — engine time of model requests (c_sample), trainer "
            "update time (c_train), group scoring, and the agents' own time beside them. "
            "Bottom: the same, cumulative, with the cost C = max(sampling, training) + credit "
            "summed over the buckets.", draw_cost),
    Picture("trainer_time.png", "Trainer time by phase",
            "Top: each step's wall time split by phase (waiting for data, prefix-tree build, "
            "forward/backward, optimizer, and the export and checkpoint after the previous "
            "step), with the recorded step time dashed. Bottom: the same, cumulative.",
            draw_trainer_time),
    Picture("kl.png", "KL and importance weights",
            "Top: per-token KL estimate (k3) between the behaviour and the current policy, "
            "mean and max per step. Bottom: importance weight π_θ/π_old, mean ± std and max, "
            "with the clipped fraction on the right axis.", draw_kl),
    Picture("domains.png", "Domains",
            f"Left: each domain's rollouts' reward (faint points) by the policy version that "
            f"generated it, and the moving mean over that domain's last {REWARD_WINDOW} "
            f"rollouts (line). Right: each domain's share of the samples trained (the mix "
            f"admission steers to the pipeline file's shares).", draw_domains),
    Picture("throughput.png", "Throughput",
            "Rollouts finished and samples trained per minute, each over the trailing minute "
            "(or 1/30 of the span when longer).",
            draw_throughput),
)  # fmt: skip


def write_report(ask: Ask, out_dir: Path, span: Span) -> Path:
    """Query the store for ``span`` through ``ask`` and render the report into ``out_dir``."""
    queries = report_queries(span)
    answers = ask(list(queries.values()))
    return render_report(frames(dict(zip(queries, answers, strict=True))), out_dir, span)


def write_run_report(web_url: str, home: Path, run_id: str) -> Path:
    """``forge-rl run``'s report into its run directory, through the streams worker that owns
    the store, over the span its summary.json records."""
    from forge_rl.report_data import run_span
    from infra.analytics import owner_key, query_owner

    key = owner_key(home)
    runs = home / "runs"

    def ask(queries: list[tuple[str, str]]) -> Answers:
        return [query_owner(web_url, sql, key=key) for _, sql in queries]

    return write_report(ask, runs / run_id / "report", run_span(runs, run_id))


def render_report(data: dict[str, Frame], out_dir: Path, span: Span) -> Path:
    """Write every picture and the page into ``out_dir``; return the page's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for picture in PICTURES:
        fig = Figure(figsize=(9, 5.5), layout="constrained")
        FigureCanvasAgg(fig)
        fig.suptitle(picture.title)
        picture.draw(fig, data)
        fig.savefig(out_dir / picture.file, dpi=100)
    page = out_dir / PAGE
    page.write_text(render_page(span))
    return page


def render_page(span: Span) -> str:
    def when(moment: datetime | None) -> str:
        return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if moment else "open"

    figures = "\n".join(
        f'<figure><img src="{html.escape(p.file)}" alt="{html.escape(p.title)}">'
        f"<figcaption>{html.escape(p.caption)}</figcaption></figure>"
        for p in PICTURES
    )
    title = html.escape(f"forge-rl report: {span.label}")
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;max-width:960px;margin:auto}}
figure{{margin:2em 0}}img{{max-width:100%}}figcaption{{color:#444}}</style></head>
<body><h1>{title}</h1>
<p>Span: {when(span.start)} to {when(span.end)}.</p>
{figures}
</body></html>
"""
