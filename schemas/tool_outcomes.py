"""Process signals from what the gateway saw of a rollout's tool use (pure).

The scorer turns them into rewards and the gateway into its truncation decision, so both read
one rule. Each signal lands on the step of the tool call it concerns:
- a malformed call (its text did not parse) → ``malformed_call``;
- a well-formed call of a tool the request did not offer → ``unknown_tool``;
- a call whose result, sent back by the agent, is flagged an error (Anthropic's ``is_error``)
  or matches ``error_pattern`` → ``error_result``;
- otherwise a call whose result is *used*: a completion at or after the step that received the
  result repeats one of the result's words of at least ``used_min_chars`` characters
  (case-insensitive, whole words) → ``used_result``.
A result is matched to its call by id. One whose id names no call the rollout made — an agent
that reads its model's answer leniently (a bare "7" taken as ``guess(7)``) makes up its own id
— answers the completion just before it: it is taken as a result of the previous step's call,
if that step made no well-formed call of its own. A call's second result earns nothing. Where
the task sent signals of its own for a step, they stand for that step and these are left out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from schemas.pipeline_file import ToolRewards
from schemas.records import ToolCall, ToolResult

WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class StepTools:
    """What one step (model call) of a rollout did with tools."""

    calls: tuple[ToolCall, ...] = ()
    """The tool calls its completion made."""
    results: tuple[ToolResult, ...] = ()
    """The tool results its request carried (answers to earlier steps' calls)."""
    completion_text: str = ""


@dataclass(frozen=True)
class ToolSignal:
    step: int
    name: str
    value: float


def words_of(text: str, min_chars: int) -> set[str]:
    return {w for w in WORD.findall(text.lower()) if len(w) >= min_chars}


def tool_signals(steps: Sequence[StepTools], rules: ToolRewards) -> list[ToolSignal]:
    """The process signals ``steps`` earn under ``rules``, in step order."""
    signals: list[ToolSignal] = []
    call_step: dict[str, int] = {}
    for step, facts in enumerate(steps):
        for call in facts.calls:
            if not call.well_formed:
                signals.append(ToolSignal(step, "malformed_call", rules.malformed_call))
            elif not call.known:
                signals.append(ToolSignal(step, "unknown_tool", rules.unknown_tool))
            if call.well_formed and call.tool_call_id:
                call_step.setdefault(call.tool_call_id, step)
    error = re.compile(rules.error_pattern)
    answered: set[str] = set()
    for step, facts in enumerate(steps):
        for result in facts.results:
            called = call_step.get(result.tool_call_id)
            key = result.tool_call_id
            if called is None and step > 0 and not _made_calls(steps[step - 1]):
                called, key = step - 1, f"#{step - 1}"  # the completion it answers
            if called is None or called >= step or key in answered:
                continue
            answered.add(key)
            if result.is_error or error.search(result.content):
                signals.append(ToolSignal(called, "error_result", rules.error_result))
            elif _used(result.content, steps[step:], rules.used_min_chars):
                signals.append(ToolSignal(called, "used_result", rules.used_result))
    return sorted(signals, key=lambda s: s.step)


def merge_signals(
    task: Sequence[tuple[int, float]], tools: Sequence[tuple[int, float]]
) -> tuple[tuple[int, float], ...]:
    """The task's signals, and the tool signals of every step the task gave none for."""
    task_steps = {step for step, _ in task}
    return (*task, *((step, value) for step, value in tools if step not in task_steps))


def step_values(
    steps: Sequence[StepTools], task: Sequence[tuple[int, float]], rules: ToolRewards
) -> list[float]:
    """Each step's net process signal, unweighted: the task's and the tool outcomes' (a
    signal past the last step counts at the last step, as the scorer counts it)."""
    derived = [(s.step, s.value) for s in tool_signals(steps, rules)]
    values = [0.0] * len(steps)
    for step, value in merge_signals(task, derived):
        if values:
            values[min(step, len(values) - 1)] += value
    return values


def _made_calls(facts: StepTools) -> bool:
    return any(call.well_formed for call in facts.calls)


def _used(content: str, later: Sequence[StepTools], min_chars: int) -> bool:
    wanted = words_of(content, min_chars)
    return bool(wanted) and any(wanted & words_of(s.completion_text, min_chars) for s in later)
