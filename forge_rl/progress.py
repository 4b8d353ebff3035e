"""Progress of `forge-rl run`: one view of the numbers, shown as a live table on a terminal and
as a plain line every ``interval_s`` otherwise (a log file, CI, a pipe), so an unattended run
says how it is doing while it runs, not only at the end."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

from rich.console import Console
from rich.live import Live
from rich.table import Table

from envs.fleet import Episode
from forge_rl.pipeline_watch import PipelineSnapshot

RECENT = 100
"""Rollouts the mean reward and the solved share are taken over."""


@dataclass(frozen=True)
class DomainView:
    """One domain's numbers in a run over several."""

    name: str
    mean_reward: float | None
    """Mean task reward of its scored rollouts among its last ``RECENT``."""
    solved: int
    window: int
    """Its last ``RECENT`` rollouts (at most)."""
    trained_share: float | None
    """Its share of the samples trained so far."""


@dataclass(frozen=True)
class ProgressView:
    elapsed_s: float
    duration_s: float
    rollouts: int
    running: int
    rollouts_per_s: float
    events: int
    events_per_s: float
    samples: int
    served_version: int
    step: int | None = None
    loss: float | None = None
    mean_reward: float | None = None
    """Mean task reward of the scored rollouts among the last ``RECENT``."""
    scored: int = 0
    """Rollouts in that mean (aborted ones have no reward)."""
    solved: int = 0
    """Solved among the last ``RECENT`` rollouts."""
    staleness_mean: float | None = None
    staleness_max: int | None = None
    domains: tuple[DomainView, ...] = ()
    """Per domain, when the run plays more than one."""
    stalled: tuple[str, ...] = ()
    """The streams worker's stalled stages, each with how long and why (its ``/health``)."""

    @property
    def window(self) -> int:
        return min(RECENT, self.rollouts)


def progress_view(
    *,
    elapsed_s: float,
    duration_s: float,
    episodes: Sequence[Episode],
    running: int,
    rollouts_per_s: float,
    pipeline: PipelineSnapshot,
    served_version: int,
    stalled: tuple[str, ...] = (),
) -> ProgressView:
    """The numbers of one moment of a run."""
    recent = episodes[-RECENT:]
    rewards = [e.reward for e in recent if e.reward is not None]
    step = pipeline.last_step
    names = sorted({e.domain for e in episodes} | set(pipeline.trained_by_domain))
    return ProgressView(
        elapsed_s=elapsed_s,
        duration_s=duration_s,
        rollouts=len(episodes),
        running=running,
        rollouts_per_s=rollouts_per_s,
        events=pipeline.events,
        events_per_s=pipeline.events_per_s,
        samples=pipeline.samples,
        served_version=served_version,
        step=step.step if step else None,
        loss=step.loss if step else None,
        mean_reward=sum(rewards) / len(rewards) if rewards else None,
        scored=len(rewards),
        solved=sum(e.status == "solved" for e in recent),
        staleness_mean=step.staleness_mean if step else None,
        staleness_max=step.staleness_max if step else None,
        domains=tuple(domain_view(n, episodes, pipeline.trained_by_domain) for n in names)
        if len(names) > 1
        else (),
        stalled=stalled,
    )


def domain_view(name: str, episodes: Sequence[Episode], trained: dict[str, int]) -> DomainView:
    recent = [e for e in episodes if e.domain == name][-RECENT:]
    rewards = [e.reward for e in recent if e.reward is not None]
    total = sum(trained.values())
    return DomainView(
        name=name,
        mean_reward=sum(rewards) / len(rewards) if rewards else None,
        solved=sum(e.status == "solved" for e in recent),
        window=len(recent),
        trained_share=trained.get(name, 0) / total if total else None,
    )


def _domain_text(domain: DomainView) -> str:
    reward = "-" if domain.mean_reward is None else f"{domain.mean_reward:+.3f}"
    share = "-" if domain.trained_share is None else f"{domain.trained_share:.0%}"
    return f"{domain.name} {reward} (solved {domain.solved}/{domain.window}, {share} of trained)"


def format_progress_line(view: ProgressView) -> str:
    """One plain line (no markup, no escape codes) for logs: every number of the view."""
    parts = [
        f"elapsed {view.elapsed_s:.0f}/{view.duration_s:.0f}s",
        f"rollouts {view.rollouts} (+{view.running} running, {view.rollouts_per_s:.1f}/s)",
        f"events {view.events} ({view.events_per_s:.0f}/s)",
        f"samples {view.samples}",
        f"policy v{view.served_version}",
        f"step {view.step} loss {view.loss:+.4f}" if view.step is not None else "step -",
    ]
    if view.mean_reward is not None:
        parts.append(f"reward {view.mean_reward:+.3f} (last {view.scored}, "
                     f"solved {view.solved}/{view.window})")  # fmt: skip
    else:
        parts.append("reward -")
    if view.staleness_mean is not None:
        parts.append(f"staleness {view.staleness_mean:.1f} (max {view.staleness_max})")
    else:
        parts.append("staleness -")
    parts += [_domain_text(d) for d in view.domains]
    parts += [f"STALLED streams {stage}" for stage in view.stalled]
    return " | ".join(parts)


def progress_table(view: ProgressView, title: str) -> Table:
    """The same numbers as a table, for the live display on a terminal."""
    table = Table(title=title, show_header=False, min_width=60)
    table.add_row("elapsed", f"{view.elapsed_s:.0f} s of {view.duration_s:.0f} s")
    table.add_row("rollouts", f"{view.rollouts} done, {view.running} running · "
                  f"{view.rollouts_per_s:.1f}/s")  # fmt: skip
    table.add_row("events", f"{view.events} · {view.events_per_s:.0f}/s")
    table.add_row("ordered samples", str(view.samples))
    table.add_row("policy", f"engine serves v{view.served_version}" + (
        f" · trainer step {view.step}, loss {view.loss:+.4f}" if view.step is not None else ""
    ))  # fmt: skip
    if view.mean_reward is not None:
        table.add_row("mean reward", f"{view.mean_reward:+.3f} (last {view.scored})"
                      f" · solved {view.solved}/{view.window}")  # fmt: skip
    if view.staleness_mean is not None:
        table.add_row("staleness", f"mean {view.staleness_mean:.1f}, max {view.staleness_max}"
                      " policy versions")  # fmt: skip
    for domain in view.domains:
        table.add_row(f"domain {domain.name}", _domain_text(domain).removeprefix(domain.name + " "))
    for stage in view.stalled:
        table.add_row("[bold red]STALLED[/bold red]", f"streams {stage}")
    return table


class ProgressDisplay(Protocol):
    def __enter__(self) -> ProgressDisplay: ...

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

    def show(self, view: ProgressView) -> None:
        """The current numbers; called about twice a second."""
        ...


class LiveProgress:
    """A table redrawn in place (terminal)."""

    def __init__(self, console: Console, title: str) -> None:
        self.title = title
        self.live = Live(console=console, refresh_per_second=2, transient=False)

    def __enter__(self) -> LiveProgress:
        self.live.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.live.__exit__(kind, exc, tb)

    def show(self, view: ProgressView) -> None:
        self.live.update(progress_table(view, self.title))


class LineProgress:
    """A plain line every ``interval_s``, and the last numbers once more at the end."""

    def __init__(
        self, console: Console, interval_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.console = console
        self.interval_s = interval_s
        self.clock = clock
        self.next_at: float | None = None
        self.pending: ProgressView | None = None

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.pending is not None:
            self._print(self.pending)

    def show(self, view: ProgressView) -> None:
        now = self.clock()
        if self.next_at is None or now >= self.next_at:
            self.next_at = now + self.interval_s
            self._print(view)
        else:
            self.pending = view

    def _print(self, view: ProgressView) -> None:
        self.pending = None
        self.console.print(format_progress_line(view), markup=False, highlight=False,
                           soft_wrap=True)  # fmt: skip


def progress_display(console: Console, title: str, interval_s: float) -> ProgressDisplay:
    """A live table on a terminal, plain lines at ``interval_s`` anywhere else."""
    if console.is_terminal:
        return LiveProgress(console, title)
    return LineProgress(console, interval_s)


@contextlib.contextmanager
def status(console: Console, message: str) -> Iterator[None]:
    """A spinner on a terminal; elsewhere the message as a plain line (a spinner prints nothing
    there, and set-up can take minutes)."""
    if console.is_terminal:
        with console.status(message):
            yield
        return
    console.print(message, markup=False, highlight=False, soft_wrap=True)
    yield
