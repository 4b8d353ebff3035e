"""The built-in task: find a secret digit with a `guess` tool, in a few turns.

Multi-turn and tool-using, yet learnable by a tiny randomly initialised model on CPU in
minutes, because the reward is graded: every turn pays for a well-formed guess that respects
the feedback so far and costs for anything else; finding the digit pays the outcome; finding
it in fewer turns earns the pipeline's completion-time reward. A random model rarely emits a
digit at all, so the first thing RL teaches it is the action format, then where to guess.
Pure functions: the runner verifies what an agent reports with them; ``GuessEnvironment``
puts them behind ``envs.task.Environment``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from envs.agent_launch import ForkedLauncher, Launcher
from envs.task import EpisodeScore, Signal

DIGITS = (0, 9)
VALID_GUESS = 0.1
INVALID_GUESS = -0.1


@dataclass(frozen=True)
class GuessTask:
    task_id: str
    secret: int
    max_turns: int
    tool_latency_s: float = 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self))


def make_task(rng: random.Random, max_turns: int, tool_latency_s: float = 0.0) -> GuessTask:
    secret = rng.randint(*DIGITS)
    return GuessTask(f"guess-{rng.getrandbits(48):012x}", secret, max_turns, tool_latency_s)


def feedback(secret: int, guess: int | None) -> str:
    """What the `guess` tool answers: the secret is higher, lower, or found."""
    if guess is None or not DIGITS[0] <= guess <= DIGITS[1]:
        return "invalid: call guess with one digit 0-9"
    if guess == secret:
        return "correct"
    return "higher" if secret > guess else "lower"


def score_episode(task: GuessTask, guesses: Sequence[int | None]) -> EpisodeScore:
    """One signal per turn (step = the turn's model call): a guess is good when it is a digit
    still possible after the feedback so far."""
    low, high = DIGITS
    signals = []
    solved = False
    for step, guess in enumerate(guesses[: task.max_turns]):
        possible = guess is not None and low <= guess <= high
        signals.append(Signal(step, "guess", VALID_GUESS if possible else INVALID_GUESS))
        if guess == task.secret:
            solved = True
            break
        if guess is not None and guess < task.secret:
            low = max(low, guess + 1)
        elif guess is not None:
            high = min(high, guess - 1)
    return EpisodeScore(tuple(signals), 1.0 if solved else 0.0, solved)


def parse_answer(line: str) -> list[int | None]:
    """The agent's last stdout line, ``{"guesses": [3, null, 7]}``; ValueError when it is not."""
    try:
        answer = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"last stdout line is not JSON: {line[:80]!r}") from exc
    guesses = answer.get("guesses") if isinstance(answer, dict) else None
    if not isinstance(guesses, list) or not all(
        g is None or (isinstance(g, int) and not isinstance(g, bool)) for g in guesses
    ):
        raise ValueError('expected {"guesses": [digit or null, ...]} as the last stdout line')
    return guesses


class GuessEnvironment:
    """The guess task behind the ``Environment`` interface."""

    name = "guess"

    def __init__(self, max_turns: int, tool_latency_s: float = 0.0) -> None:
        self.max_turns = max_turns
        self.tool_latency_s = tool_latency_s

    def make_task(self, rng: random.Random) -> GuessTask:
        return make_task(rng, self.max_turns, self.tool_latency_s)

    def agent(self) -> Launcher:
        from envs.guess import agent  # the OpenAI SDK is imported only when an agent runs

        return ForkedLauncher(agent.main, ["openai", "envs.guess.agent"])

    def score(self, task: GuessTask, answer: str) -> EpisodeScore:
        return score_episode(task, parse_answer(answer))
