"""The environments a run can pick by name (``run.task``); a new task adds one entry here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from envs.echo.task import EchoEnvironment
from envs.guess.task import GuessEnvironment
from envs.task import Environment, TaskOptions

ENVIRONMENTS: dict[str, Callable[[TaskOptions], Environment[Any]]] = {
    "guess": lambda options: GuessEnvironment(options.max_turns, options.tool_latency_s),
    "echo": lambda options: EchoEnvironment(),
}


def make_environment(name: str, options: TaskOptions) -> Environment[Any]:
    """The environment called ``name``; KeyError for an unknown one (settings check first)."""
    return ENVIRONMENTS[name](options)
