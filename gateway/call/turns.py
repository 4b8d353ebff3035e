"""A chat message as the model sees it, compared two ways (pure).

Exactly — role, text and each tool call's name and argument text as sent — to tell whether an
agent sent back the turns the gateway answered, so the next prompt may extend the sampled
tokens (``gateway.call.prompts``). Canonically — arguments as parsed JSON — to tell whether the
messages extend an earlier call even where the agent re-serialised its arguments (spacing,
``false``): such a call re-renders history, and if the tokens then differ it is marked
``retokenization_drift``. Reasoning and tool-call ids are left out of both: clients drop or
rename them, and the families' templates render neither on earlier turns.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from gateway.call.tool_calls import ParsedCompletion, parse_completion

Turn = tuple[Any, ...]


def _canonical(arguments: Any) -> Any:
    if not isinstance(arguments, str):
        return json.dumps(arguments, sort_keys=True)
    try:
        return json.dumps(json.loads(arguments), sort_keys=True)
    except ValueError:
        return arguments


def normalise_message(message: Mapping[str, Any], *, canonical: bool = False) -> Turn:
    """What of a chat message the model sees: role, text, tool calls (ids dropped)."""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(
            str(p["text"]) for p in content if isinstance(p, dict) and p.get("text") is not None
        )
    calls = []
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        function = function if isinstance(function, Mapping) else {}
        arguments = function.get("arguments")
        calls.append((function.get("name"), _canonical(arguments) if canonical else arguments))
    return (message.get("role"), content or "", tuple(calls))


def message_turns(
    messages: Iterable[Mapping[str, Any]], *, canonical: bool = False
) -> tuple[Turn, ...]:
    return tuple(normalise_message(m, canonical=canonical) for m in messages)


def answered_turn(parsed: ParsedCompletion, tools_read: bool, *, canonical: bool = False) -> Turn:
    """The assistant turn the agent was answered with, as it would send it back. Without tools
    read, any call stays in the text, and a template renders it back as a call: canonically it
    is compared as one."""
    content, calls = parsed.content, parsed.calls
    if canonical and not tools_read:
        as_call = parse_completion(content or "")
        content, calls = as_call.content, as_call.calls
    message = {"role": "assistant", "content": content, "tool_calls": calls}
    return normalise_message(message, canonical=canonical)


def render_key(tools: Any, template_kwargs: Mapping[str, Any]) -> str:
    """What besides the messages shapes a prompt: a bridge extends only a call rendered with
    the same tools and template kwargs."""
    return json.dumps([tools, dict(template_kwargs)], sort_keys=True, default=str)
