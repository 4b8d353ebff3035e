"""Both launchers honour one contract: environment in, last stdout line and exit code out."""

from __future__ import annotations

import asyncio
import os
import sys

from envs.agent_launch import AgentExit, CommandLauncher, ForkedLauncher
from envs.fleet import verdict
from envs.guess.task import GuessEnvironment, GuessTask

ENV = GuessEnvironment(max_turns=4)
TASK = GuessTask("t", secret=1, max_turns=4)


def echo_task() -> None:
    print("thinking…")
    print(os.environ["FORGE_TASK"])


def crash() -> None:
    raise RuntimeError("tool sandbox broke")


def hang() -> None:
    import time

    time.sleep(60)


def run(launcher, timeout_s: float = 30.0) -> AgentExit:
    return asyncio.run(launcher.run({"FORGE_TASK": '{"guesses": [1]}', "PATH": os.environ["PATH"]},
                                    timeout_s))  # fmt: skip


def test_command_launcher_passes_the_environment_and_reads_the_last_line():
    exit_ = run(CommandLauncher(f"{sys.executable} -c 'import os; print(1); "
                                "print(os.environ[\"FORGE_TASK\"])'"))  # fmt: skip
    assert exit_.code == 0 and exit_.last_line == '{"guesses": [1]}'
    score = verdict(ENV, TASK, exit_)
    assert not isinstance(score, str) and score.solved


def test_command_launcher_reports_failures_and_kills_on_timeout():
    failed = run(CommandLauncher("echo oops >&2; exit 3"))
    assert verdict(ENV, TASK, failed) == "agent exited 3: oops"
    slow = run(CommandLauncher("sleep 30"), timeout_s=0.5)
    assert slow.code != 0 and "killed after" in slow.stderr


def test_forked_launcher_runs_the_target_with_the_episode_environment():
    launcher = ForkedLauncher(echo_task, ["json"])
    exit_ = run(launcher)
    assert exit_.code == 0 and exit_.last_line == '{"guesses": [1]}'
    crashed = run(ForkedLauncher(crash, []))
    assert crashed.code == 1 and "tool sandbox broke" in crashed.stderr
    problem = verdict(ENV, TASK, crashed)
    assert isinstance(problem, str) and problem.startswith("agent exited 1")
    hung = run(ForkedLauncher(hang, []), timeout_s=0.5)
    assert hung.code != 0 and "killed after" in hung.stderr


def test_an_agent_without_an_answer_is_aborted_with_the_reason():
    problem = verdict(ENV, TASK, AgentExit(0, "I think it is 4\n", ""))
    assert isinstance(problem, str) and "no answer" in problem
