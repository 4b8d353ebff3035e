"""Say the digit: one turn, no tools — the model is shown a digit and must answer with it.

A task of another kind than the guess task (single-turn, no tool, an exact answer), small
enough for the tiny model to learn on CPU in minutes: the graded reward first pays for any
digit at all (a random model emits one in about ten replies), then the outcome for the right
one, which it can only get by copying it from the prompt. Pure functions; ``EchoEnvironment``
puts them behind ``envs.task.Environment``.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import asdict, dataclass

from envs.agent_launch import ForkedLauncher, Launcher
from envs.task import EpisodeScore, Signal

A_DIGIT = 0.1
NO_DIGIT = -0.1


@dataclass(frozen=True)
class EchoTask:
    task_id: str
    digit: int

    def to_json(self) -> str:
        return json.dumps(asdict(self))


def make_task(rng: random.Random) -> EchoTask:
    return EchoTask(f"echo-{rng.getrandbits(48):012x}", rng.randint(0, 9))


def first_digit(text: str) -> int | None:
    found = re.search(r"\d", text)
    return int(found.group()) if found else None


def score_answer(task: EchoTask, answer: int | None) -> EpisodeScore:
    """A signal for answering with a digit at all, the outcome for the right one."""
    signal = Signal(0, "digit", A_DIGIT if answer is not None else NO_DIGIT)
    solved = answer == task.digit
    return EpisodeScore((signal,), 1.0 if solved else 0.0, solved)


def parse_answer(line: str) -> int | None:
    """The agent's last stdout line, ``{"answer": 7}`` (or null); ValueError when it is not."""
    try:
        answer = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"last stdout line is not JSON: {line[:80]!r}") from exc
    if not isinstance(answer, dict) or "answer" not in answer:
        raise ValueError('expected {"answer": digit or null} as the last stdout line')
    value = answer["answer"]
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError('expected {"answer": digit or null} as the last stdout line')
    return value


class EchoEnvironment:
    """The echo task behind the ``Environment`` interface."""

    name = "echo"

    def make_task(self, rng: random.Random) -> EchoTask:
        return make_task(rng)

    def agent(self) -> Launcher:
        from envs.echo import agent  # the OpenAI SDK is imported only when an agent runs

        return ForkedLauncher(agent.main, ["openai", "envs.echo.agent"])

    def score(self, task: EchoTask, answer: str) -> EpisodeScore:
        return score_answer(task, parse_answer(answer))
