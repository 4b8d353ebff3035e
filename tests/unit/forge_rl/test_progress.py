"""The run's progress: one plain line at an interval when the output is not a terminal."""

from __future__ import annotations

import io
from datetime import UTC, datetime

import pytest
from rich.console import Console

from envs.fleet import Episode
from forge_rl.pipeline_watch import PipelineSnapshot
from forge_rl.progress import (
    LineProgress,
    LiveProgress,
    ProgressView,
    format_progress_line,
    progress_display,
    progress_view,
    status,
)
from schemas.records import TrainStep

STEP = TrainStep(step=12, policy_version=11, loss=-0.0123, samples=8, tokens=100,
                 unique_tokens=60, dedup_ratio=1.6, clip_fraction=0.0, staleness_mean=1.25,
                 staleness_max=3, step_time_s=0.3, ts=datetime.now(UTC))  # fmt: skip


def episode(status: str, reward: float | None, domain: str = "default") -> Episode:
    return Episode("r", 0.0, 1.0, status, reward, 2, domain)


def view(**overrides) -> ProgressView:
    fields = dict(elapsed_s=70.4, duration_s=480, rollouts=123, running=8, rollouts_per_s=1.84,
                  events=4567, events_per_s=65.2, samples=100, served_version=11)  # fmt: skip
    return ProgressView(**{**fields, **overrides})


def test_the_line_holds_every_number():
    line = format_progress_line(view(step=12, loss=-0.0123, mean_reward=0.1234, scored=98,
                                     solved=40, staleness_mean=1.25, staleness_max=3))  # fmt: skip
    assert line == (
        "elapsed 70/480s | rollouts 123 (+8 running, 1.8/s) | events 4567 (65/s) | "
        "samples 100 | policy v11 | step 12 loss -0.0123 | "
        "reward +0.123 (last 98, solved 40/100) | staleness 1.2 (max 3)"
    )


def test_with_several_domains_the_line_gives_each_ones_reward_and_trained_share():
    episodes = [episode("solved", 1.1, "echo")] * 3 + [episode("unsolved", -0.2, "guess")]
    episodes += [episode("truncated", None, "guess")]
    pipeline = PipelineSnapshot(9, 1.5, 4, STEP, trained_by_domain={"echo": 30, "guess": 10})
    got = progress_view(elapsed_s=5, duration_s=60, episodes=episodes, running=0,
                        rollouts_per_s=1.0, pipeline=pipeline, served_version=1)  # fmt: skip
    assert format_progress_line(got).endswith(
        "| echo +1.100 (solved 3/3, 75% of trained) | guess -0.200 (solved 0/2, 25% of trained)"
    )
    one = progress_view(elapsed_s=5, duration_s=60, episodes=episodes[:3], running=0,
                        rollouts_per_s=1.0, pipeline=PipelineSnapshot(),
                        served_version=1)  # fmt: skip
    assert one.domains == ()


def test_before_training_and_rewards_the_line_says_so():
    line = format_progress_line(view(rollouts=0, running=0))
    assert line.endswith("| step - | reward - | staleness -")


def test_the_view_takes_rewards_of_the_last_hundred_and_the_last_step():
    episodes = [episode("unsolved", 0.0)] * 50 + [episode("solved", 1.2)] * 60
    episodes += [episode("aborted", None)] * 10
    got = progress_view(elapsed_s=5, duration_s=60, episodes=episodes, running=2,
                        rollouts_per_s=3.0, pipeline=PipelineSnapshot(9, 1.5, 4, STEP),
                        served_version=11)  # fmt: skip
    assert (got.rollouts, got.scored, got.solved, got.window) == (120, 90, 60, 100)
    assert got.mean_reward == pytest.approx(60 * 1.2 / 90)
    assert (got.step, got.loss, got.staleness_max) == (12, -0.0123, 3)
    assert (got.events, got.events_per_s, got.samples) == (9, 1.5, 4)
    empty = progress_view(elapsed_s=0, duration_s=60, episodes=[], running=0, rollouts_per_s=0,
                          pipeline=PipelineSnapshot(), served_version=0)  # fmt: skip
    assert empty.mean_reward is None and empty.step is None and empty.window == 0


def plain_console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=False, width=80), out


def test_without_a_terminal_plain_lines_come_at_the_interval_and_once_at_the_end():
    console, out = plain_console()
    display = progress_display(console, "run", interval_s=10)
    assert isinstance(display, LineProgress)
    now = [0.0]
    display.clock = lambda: now[0]
    with display:
        for t, rollouts in [(0, 1), (5, 2), (10, 3), (12, 4), (19.9, 5), (20, 6), (23, 7)]:
            now[0] = t
            display.show(view(rollouts=rollouts))
    lines = out.getvalue().splitlines()
    assert [line.split(" | ")[1].split(" (")[0] for line in lines] == [
        "rollouts 1", "rollouts 3", "rollouts 6", "rollouts 7"
    ]  # fmt: skip
    assert "\x1b" not in out.getvalue()
    assert all(len(line) > 80 for line in lines)  # never wrapped to the console width


def test_status_is_a_plain_line_without_a_terminal_and_a_terminal_gets_the_live_table():
    console, out = plain_console()
    with status(console, "bringing up Kafka…"):
        pass
    assert out.getvalue() == "bringing up Kafka…\n"
    terminal = Console(file=io.StringIO(), force_terminal=True)
    assert isinstance(progress_display(terminal, "run", interval_s=10), LiveProgress)


def test_a_stalled_stage_of_the_streams_worker_is_on_the_line_and_in_the_table():
    stalled = ("events partition 2 commits failing for 130 s: OutOfOrderSequenceNumber()",)
    line = format_progress_line(view(stalled=stalled))
    assert line.endswith(
        "| STALLED streams events partition 2 commits failing for 130 s: OutOfOrderSequenceNumber()"
    )
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=False)
    with LiveProgress(console, "run") as live:
        live.show(view(stalled=stalled))
    assert "STALLED" in out.getvalue() and "events partition 2 commits failing" in out.getvalue()
