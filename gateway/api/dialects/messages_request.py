"""Anthropic Messages requests, validated and translated into the gateway's one chat call
(pure).

What a block means for the prompt, in the order Claude Code and the ``anthropic`` SDK send
them: a ``system`` string or text blocks (and Claude Code's ``role: system`` messages among the
messages) become system messages; a user turn's ``tool_result`` blocks become tool messages (in
their order, before the turn's text), its text blocks the user message; an assistant turn's
``thinking`` blocks its reasoning, its text its content, its ``tool_use`` blocks its tool calls
(``input`` written back as compact JSON, as the gateway answered it). ``redacted_thinking`` is
another model's encrypted reasoning: accepted, not rendered. Images, documents, search results,
server tools and their results are refused naming the field; ``cache_control``,
``context_management``, ``output_config.effort``, ``metadata`` and ``thinking`` (the policy
reasons as its family does, whatever the budget) are accepted and have no effect.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gateway.call.call_input import ChatCall, Sampling
from gateway.call.chat_messages import ARGUMENTS_VALUE, render_ready
from gateway.errors import InvalidRequestError

Finite = Annotated[float, Field(allow_inf_nan=False)]
StopText = Annotated[str, Field(min_length=1, max_length=256)]
MAX_STOP_SEQUENCES = 4


class MessagesTool(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    type: str | None = None
    """``custom`` or absent; a server tool's type (``web_search_…``, ``bash_…``) is refused."""


class MessagesToolChoice(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None


class MessagesTurn(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["user", "assistant", "system"]
    content: str | list[dict[str, Any]]


class MessagesRequest(BaseModel):
    """``POST /v1/messages`` (and ``count_tokens``, which takes the same fields)."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, max_length=256)
    messages: list[MessagesTurn] = Field(min_length=1)
    max_tokens: int = Field(default=0, ge=0, le=2**31 - 1)
    """Required by ``/v1/messages`` (checked there); ``count_tokens`` needs none."""
    system: str | list[dict[str, Any]] | None = None
    tools: list[MessagesTool] | None = None
    tool_choice: MessagesToolChoice | None = None
    temperature: Finite | None = Field(default=None, ge=0, le=2)
    top_p: Finite | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=0, le=2**31 - 1)
    stop_sequences: list[StopText] | None = Field(default=None, max_length=MAX_STOP_SEQUENCES)
    stream: bool = False
    metadata: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None


def _text_blocks(blocks: Any, where: str) -> str:
    """The text of a string or of text blocks (``cache_control`` and ``citations`` ignored)."""
    if isinstance(blocks, str):
        return blocks
    texts = []
    for i, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind != "text" or not isinstance(block.get("text"), str):
            raise _refused(kind, f"{where}.{i}")
        texts.append(block["text"])
    return "\n".join(texts)


def _refused(kind: Any, where: str) -> InvalidRequestError:
    return InvalidRequestError(
        f"content block type {kind!r} cannot be taken by this policy (text, tool_use, "
        "tool_result and thinking only)",
        param=f"{where}.type",
    )


def _user_turn(content: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    """A user turn's tool results as tool messages, then its text as the user message."""
    results, texts = [], []
    for i, block in enumerate(content):
        kind = block.get("type")
        if kind == "tool_result":
            results.append({
                "role": "tool",
                "tool_call_id": str(block.get("tool_use_id") or ""),
                "content": _text_blocks(block.get("content") or "", f"{where}.{i}.content"),
                "is_error": block.get("is_error") is True,
            })  # fmt: skip
        elif kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        else:
            raise _refused(kind, f"{where}.{i}")
    return [*results, *([{"role": "user", "content": "\n".join(texts)}] if texts else [])]


def _assistant_turn(content: list[dict[str, Any]], where: str) -> dict[str, Any]:
    reasoning, texts, calls = [], [], []
    for i, block in enumerate(content):
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            reasoning.append(block["thinking"])
        elif kind == "redacted_thinking":
            continue
        elif kind == "tool_use" and isinstance(block.get("name"), str):
            value = block.get("input") or {}
            function = {"name": block["name"], "arguments": json.dumps(value, ensure_ascii=False),
                        ARGUMENTS_VALUE: value}  # fmt: skip
            calls.append({"id": str(block.get("id") or ""), "type": "function",
                          "function": function})  # fmt: skip
        else:
            raise _refused(kind, f"{where}.{i}")
    turn: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts), "tool_calls": calls}
    if reasoning:
        turn["reasoning_content"] = "\n".join(reasoning)
    return turn


def chat_messages(body: MessagesRequest) -> list[dict[str, Any]]:
    """The conversation as chat messages (see the module docstring)."""
    out: list[dict[str, Any]] = []
    if body.system:
        out.append({"role": "system", "content": _text_blocks(body.system, "system")})
    for n, turn in enumerate(body.messages):
        where = f"messages.{n}.content"
        if isinstance(turn.content, str):
            out.append({"role": turn.role, "content": turn.content})
        elif turn.role == "user":
            out += _user_turn(turn.content, where)
        elif turn.role == "assistant":
            out.append(_assistant_turn(turn.content, where))
        else:
            out.append({"role": "system", "content": _text_blocks(turn.content, where)})
    return out


def chat_tools(body: MessagesRequest) -> list[dict[str, Any]] | None:
    """The tools in Chat Completions' shape; a server tool refused."""
    if not body.tools:
        return None
    tools = []
    for i, tool in enumerate(body.tools):
        if tool.type not in (None, "custom"):
            raise InvalidRequestError(
                f"server tool {tool.type!r} cannot be run by this gateway", param=f"tools.{i}.type"
            )
        function = {"name": tool.name, "description": tool.description or "",
                    "parameters": tool.input_schema}  # fmt: skip
        tools.append({"type": "function", "function": function})
    return tools


def messages_chat_call(body: MessagesRequest) -> ChatCall:
    """A Messages request in the gateway's own terms."""
    choice = body.tool_choice.type if body.tool_choice is not None else "auto"
    name = body.tool_choice.name if body.tool_choice is not None else None
    if choice == "tool" and not name:
        raise InvalidRequestError("tool_choice type tool needs a name", param="tool_choice")
    as_json, schema = _output_format(body)
    sampling = Sampling(
        max_tokens=body.max_tokens or None,
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k or 0,
        stop=tuple(body.stop_sequences or ()),
    )
    return ChatCall(
        endpoint="messages",
        model=body.model,
        messages=render_ready(chat_messages(body)),
        tools=chat_tools(body),
        sampling=sampling,
        tools_enabled=choice != "none",
        forced_tool=choice in ("any", "tool"),
        tool_name=name if choice == "tool" else None,
        json_output=as_json,
        json_schema=schema,
        format_param="output_config.format",
    )


def _output_format(body: MessagesRequest) -> tuple[bool, Any]:
    """(JSON asked, its schema) of ``output_config.format`` (``{type: json_schema, schema}``)."""
    spec = (body.output_config or {}).get("format")
    if spec is None:
        return False, None
    if isinstance(spec, dict) and spec.get("type") == "json_schema":
        schema = spec.get("schema")
        if isinstance(schema, dict):
            return True, schema
    raise InvalidRequestError(
        "output_config.format must be {type: json_schema, schema: {...}}",
        param="output_config.format",
    )
