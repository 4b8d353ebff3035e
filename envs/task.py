"""The task interface: what the fleet needs from an environment, and nothing else.

An environment makes tasks, names the agent that plays them by default, and scores what an
agent reports — the last line it printed — into process signals and an outcome. The agent is
a black box that gets the task as JSON in FORGE_TASK; scoring is the environment's own
verification, never the agent's word.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import NamedTuple, Protocol, TypeVar

from envs.agent_launch import Launcher


class Signal(NamedTuple):
    """One process reward: ``step`` is the index of the model call it is attached to."""

    step: int
    name: str
    value: float


@dataclass(frozen=True)
class EpisodeScore:
    signals: tuple[Signal, ...]
    outcome: float
    solved: bool

    @property
    def total(self) -> float:
        """The task's reward of the episode: outcome plus every process signal."""
        return self.outcome + sum(s.value for s in self.signals)


class TaskSpec(Protocol):
    """One task, as its agent receives it."""

    @property
    def task_id(self) -> str: ...

    def to_json(self) -> str:
        """The FORGE_TASK an agent reads."""
        ...


@dataclass(frozen=True)
class TaskOptions:
    """What a run tells every environment it builds."""

    max_turns: int
    tool_latency_s: float = 0.0


T = TypeVar("T", bound=TaskSpec)


class Environment(Protocol[T]):
    @property
    def name(self) -> str:
        """Recorded with each group (metadata ``task``)."""
        ...

    def make_task(self, rng: random.Random) -> T:
        """A new task; all randomness comes from ``rng`` (runs are reproducible by seed)."""
        ...

    def agent(self) -> Launcher:
        """The built-in agent, used unless the run names a command (``--agent-cmd``)."""
        ...

    def score(self, task: T, answer: str) -> EpisodeScore:
        """Verify the agent's last stdout line; ValueError when it is no answer at all."""
        ...
