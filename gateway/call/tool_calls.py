"""Tool calls in generated text and tool results in a request: what the log records of them
(pure).

A completion's tool calls are parsed once, here: the ids the agent is answered with are the
ids the log records, so a later tool message names a call the scorer can find. A
``<tool_call>`` block whose body is not a JSON object with a name, or one never closed, is a
malformed call: recorded, never shown to the agent as a call.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from schemas.records import ToolCall, ToolResult

TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
OPENING = "<tool_call>"
RESULT_CHARS = 4096
"""A tool result is recorded up to this many characters: enough for the rules that read it."""


@dataclass(frozen=True)
class ParsedCompletion:
    content: str | None
    """The text left once well-formed calls are taken out (None when only calls remain)."""
    calls: list[dict[str, Any]]
    """The well-formed calls in OpenAI's ``tool_calls`` shape."""
    recorded: list[ToolCall]
    """Every call, malformed ones included, as the log records it."""
    reasoning: str | None = None
    """What the model reasoned before its answer (a ``<think>`` block), apart from it."""


def parse_completion(text: str, offered: frozenset[str] = frozenset()) -> ParsedCompletion:
    """Qwen/Hermes-style tool calls in ``text``; ``offered``: the tool names the request gave.
    Well-formed calls leave the text; a malformed one stays in it, for the agent to see."""
    calls: list[dict[str, Any]] = []
    recorded: list[ToolCall] = []

    def take(match: re.Match[str]) -> str:
        parsed = _json_object(match.group(1))
        if parsed is None or "name" not in parsed:
            recorded.append(ToolCall("", "", well_formed=False, known=False))
            return match.group(0)
        name, arguments = str(parsed["name"]), parsed.get("arguments", {})
        call_id = f"call_{uuid.uuid4().hex[:24]}"
        calls.append(
            {
                "id": call_id,
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                },
            }
        )
        recorded.append(ToolCall(call_id, name, well_formed=True, known=name in offered))
        return ""

    rest = TOOL_CALL.sub(take, text)
    if OPENING in TOOL_CALL.sub("", rest):  # opened and never closed (cut by max_tokens)
        recorded.append(ToolCall("", "", well_formed=False, known=False))
    if not calls:
        return ParsedCompletion(text, [], recorded)
    return ParsedCompletion(rest.strip() or None, calls, recorded)


THINK_END = "</think>"


def split_reasoning(text: str) -> tuple[str | None, str]:
    """(reasoning, the rest) of a completion's text: what comes before ``</think>`` (an opening
    ``<think>`` dropped) is reasoning; without it there is none."""
    head, found, rest = text.partition(THINK_END)
    if not found:
        return None, text
    return head.removeprefix("<think>").strip("\n") or None, rest.lstrip("\n")


def plain_completion(text: str) -> ParsedCompletion:
    """A completion read without tools (none offered, or tool_choice none)."""
    return ParsedCompletion(text, [], [])


def offered_tools(tools: Iterable[Mapping[str, Any]] | None) -> frozenset[str]:
    names = set()
    for tool in tools or ():
        function = tool.get("function")
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            names.add(function["name"])
    return frozenset(names)


def new_tool_results(messages: list[dict[str, Any]]) -> list[ToolResult]:
    """The tool messages after the last assistant message: the results the agent sends back
    with this call (earlier ones were sent, and recorded, with earlier calls)."""
    last_assistant = max(
        (i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1
    )
    results = []
    for message in messages[last_assistant + 1 :]:
        if message.get("role") == "tool":
            content = _text(message.get("content"))
            results.append(ToolResult(
                str(message.get("tool_call_id") or ""), content[:RESULT_CHARS],
                is_error=message.get("is_error") is True,
            ))  # fmt: skip
    return results


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p["text"]) for p in content if isinstance(p, dict) and "text" in p)
    return "" if content is None else str(content)


def _json_object(body: str) -> dict[str, Any] | None:
    try:
        parsed = json.loads(body)
    except json.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None
