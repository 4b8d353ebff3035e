"""Chat messages as the renderer takes them: every content a string, nothing a template would
drop unseen (pure).

Chat Completions lets ``content`` be a list of parts; a chat template renders only string
content, so parts handed to it are silently dropped and the model sees a prompt the agent never
wrote. Here text parts are joined with a newline, as vLLM's chat renderer joins them, for every
role; a part the policy cannot take (an image, audio, a file) is refused with a 400 naming it.
The other shapes a template would drop are decided here too (docs/running.md lists them):
``developer`` is rendered as ``system`` (its meaning in the API); a ``name`` on a system, user
or assistant message, and the deprecated ``function_call``, are refused; a tool message's
``name``, ``tool_call_id`` and ``is_error`` are kept for the gateway (the call they answer, the
tool-outcome rules), not rendered.
Dialects (Messages, Responses) translate into this same shape, so the one rendering sees one
form whatever the agent speaks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.errors import InvalidRequestError

ARGUMENTS_VALUE = "arguments_value"
"""Set on a tool call by a dialect whose clients send arguments back as a value (Anthropic's
``tool_use.input``), not as the text they were answered with (``gateway.call.prompts``)."""

TEXT_PARTS = frozenset({"text", "input_text", "output_text", "refusal"})
"""Part types whose text is the content (``refusal``: an assistant's, as it said it)."""
PART_SEPARATOR = "\n"
ROLES = frozenset({"system", "user", "assistant", "tool"})


def joined_text(content: Any, where: str) -> str:
    """A message's content as one string: a string as it is, None as empty, text parts joined;
    anything else a 400 naming ``where`` (the field path)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequestError("content must be a string or a list of parts", param=where)
    texts = []
    for i, part in enumerate(content):
        if not isinstance(part, Mapping):
            raise InvalidRequestError("a content part must be an object", param=f"{where}.{i}")
        kind = part.get("type")
        if kind not in TEXT_PARTS:
            raise InvalidRequestError(
                f"content part type {kind!r} cannot be taken by this policy (text only)",
                param=f"{where}.{i}.type",
            )
        text = part.get("text", part.get("refusal"))
        if not isinstance(text, str):
            raise InvalidRequestError("a text part needs its text", param=f"{where}.{i}.text")
        texts.append(text)
    return PART_SEPARATOR.join(texts)


def _tool_call(call: Any, where: str) -> dict[str, Any]:
    """An assistant's tool call with its arguments as the string the model wrote (an object
    sent by a client is written back as compact JSON)."""
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise InvalidRequestError("a tool call needs function.name", param=f"{where}.function")
    arguments = function.get("arguments", "")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    written: dict[str, Any] = {"name": function["name"], "arguments": arguments}
    if ARGUMENTS_VALUE in function:  # a dialect's value, matched to what was answered later
        written[ARGUMENTS_VALUE] = function[ARGUMENTS_VALUE]
    out = {"type": "function", "function": written}
    if isinstance(call.get("id"), str):
        out["id"] = call["id"]
    return out


def render_ready(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The messages in the one form every dialect ends in (see the module docstring)."""
    out = []
    for i, message in enumerate(messages):
        where = f"messages.{i}"
        role = message.get("role")
        role = "system" if role == "developer" else role
        if role not in ROLES:
            raise InvalidRequestError(f"role {role!r} is not a chat role", param=f"{where}.role")
        if message.get("function_call") is not None:
            raise InvalidRequestError(
                "function_call is deprecated and not rendered; send tool_calls",
                param=f"{where}.function_call",
            )
        if role != "tool" and message.get("name"):
            raise InvalidRequestError(
                "a message name is not rendered by this policy's template",
                param=f"{where}.name",
            )
        ready: dict[str, Any] = {
            "role": role,
            "content": joined_text(message.get("content"), f"{where}.content"),
        }
        if role == "assistant":
            calls = message.get("tool_calls") or []
            if calls:
                ready["tool_calls"] = [
                    _tool_call(c, f"{where}.tool_calls.{k}") for k, c in enumerate(calls)
                ]
            reasoning = message.get("reasoning_content", message.get("reasoning"))
            if isinstance(reasoning, str) and reasoning:
                ready["reasoning_content"] = reasoning
        if role == "tool":
            for key in ("tool_call_id", "name"):
                if isinstance(message.get(key), str):
                    ready[key] = message[key]
            if message.get("is_error") is True:  # a dialect's flag, for the tool-outcome rules
                ready["is_error"] = True
        out.append(ready)
    return out
