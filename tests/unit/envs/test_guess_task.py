"""The built-in task's rewards, against values computed by hand."""

from __future__ import annotations

import json
import random
import time
from types import SimpleNamespace

import pytest

from envs.guess.agent import play
from envs.guess.task import (
    GuessEnvironment,
    GuessTask,
    feedback,
    make_task,
    parse_answer,
    score_episode,
)

TASK = GuessTask("t", secret=6, max_turns=4)


def test_feedback_says_where_the_secret_is():
    assert feedback(6, 3) == "higher"
    assert feedback(6, 8) == "lower"
    assert feedback(6, 6) == "correct"
    assert feedback(6, None).startswith("invalid")
    assert feedback(6, 12).startswith("invalid")


@pytest.mark.parametrize(
    ("guesses", "signals", "outcome"),
    [
        # 5 (possible) -> higher; 7 (possible in 6..9) -> lower; 6 found.
        ([5, 7, 6], (0.1, 0.1, 0.1), 1.0),
        # 5 -> higher; 2 is ruled out; no digit; 6 found on the last turn.
        ([5, 2, None, 6], (0.1, -0.1, -0.1, 0.1), 1.0),
        # 9 -> lower; 9 again is ruled out; 1, 2 possible but wrong: not found.
        ([9, 9, 1, 2], (0.1, -0.1, 0.1, 0.1), 0.0),
        # Guesses past max_turns do not count.
        ([0, 1, 2, 3, 6], (0.1, 0.1, 0.1, 0.1), 0.0),
        ([], (), 0.0),
    ],
)
def test_score_episode_by_hand(guesses, signals, outcome):
    score = score_episode(TASK, guesses)
    assert [s.value for s in score.signals] == pytest.approx(signals)
    assert [s.step for s in score.signals] == list(range(len(signals)))
    assert {s.name for s in score.signals} <= {"guess"}
    assert score.outcome == outcome and score.solved == (outcome == 1.0)
    assert score.total == pytest.approx(outcome + sum(signals))


def test_tasks_are_reproducible_from_the_seed():
    first = [make_task(random.Random(3), 4) for _ in range(2)]
    assert first[0] == first[1]
    assert GuessTask(**json.loads(first[0].to_json())) == first[0]


def test_parse_answer_accepts_the_contract_and_names_what_is_wrong():
    assert parse_answer('{"guesses": [3, null, 7]}') == [3, None, 7]
    for bad, why in [("guess 3", "not JSON"), ('{"guesses": "3"}', "expected"),
                     ('{"guesses": [true]}', "expected"), ("[1]", "expected")]:  # fmt: skip
        with pytest.raises(ValueError, match=why):
            parse_answer(bad)


def test_the_environment_makes_tasks_and_scores_the_agents_last_line():
    env = GuessEnvironment(max_turns=4)
    task = env.make_task(random.Random(3))
    assert task == make_task(random.Random(3), 4)
    score = env.score(TASK, '{"guesses": [5, 7, 6]}')
    assert score == score_episode(TASK, [5, 7, 6]) and score.solved
    with pytest.raises(ValueError, match="not JSON"):
        env.score(TASK, "six")


class Completions:
    """A policy that always guesses 3, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def create(self, **_: object) -> SimpleNamespace:
        self.calls += 1
        message = SimpleNamespace(content="3", tool_calls=None)
        return SimpleNamespace(choices=[SimpleNamespace(message=message)])


def test_the_tool_takes_its_latency_on_every_call_and_the_task_carries_it():
    completions = Completions()
    client = SimpleNamespace(chat=SimpleNamespace(completions=completions))
    started = time.monotonic()
    guesses = play(client, secret=6, max_turns=3, tool_latency_s=0.05)  # type: ignore[arg-type]
    assert guesses == [3, 3, 3] and completions.calls == 3
    assert time.monotonic() - started >= 0.15
    task = GuessEnvironment(max_turns=3, tool_latency_s=0.05).make_task(random.Random(0))
    assert json.loads(task.to_json())["tool_latency_s"] == 0.05
