"""The echo task's rewards and answer format, against values computed by hand."""

from __future__ import annotations

import random

import pytest

from envs.echo.task import EchoEnvironment, EchoTask, first_digit, parse_answer, score_answer
from envs.task import Signal

TASK = EchoTask("t", digit=7)


def test_the_right_digit_is_solved_and_any_digit_earns_its_signal():
    assert score_answer(TASK, 7).total == pytest.approx(1.1) and score_answer(TASK, 7).solved
    wrong = score_answer(TASK, 3)
    assert (wrong.outcome, wrong.solved, wrong.signals) == (0.0, False, (Signal(0, "digit", 0.1),))
    assert score_answer(TASK, None).total == pytest.approx(-0.1)


def test_the_first_digit_of_a_reply_is_its_answer():
    assert first_digit("it is 7, or 8") == 7
    assert first_digit("seven") is None


@pytest.mark.parametrize("line", ["", "7", '{"answer": "7"}', '{"answer": true}', "[1]"])
def test_anything_but_an_answer_line_is_no_answer(line):
    with pytest.raises(ValueError, match=r"answer|JSON"):
        parse_answer(line)


def test_the_environment_scores_the_agents_last_line_and_makes_tasks_by_seed():
    env = EchoEnvironment()
    assert env.score(TASK, '{"answer": 7}').solved
    assert env.score(TASK, '{"answer": null}').total == pytest.approx(-0.1)
    assert env.make_task(random.Random(3)) == env.make_task(random.Random(3))
