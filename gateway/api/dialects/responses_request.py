"""OpenAI Responses requests, validated and translated into the gateway's one chat call
(pure).

Stateless: ``input`` carries the whole conversation — a string, or items: messages (``input_text``
/ ``output_text`` parts; roles user, assistant, system, developer), ``function_call`` and
``function_call_output`` items, and ``reasoning`` items (their text, or what this gateway put in
``encrypted_content``, becomes the next assistant turn's reasoning). ``instructions`` is a system
message before it all. A ``previous_response_id`` is refused: the gateway stores no responses
(``store`` is accepted and changes nothing), so an agent sends the full input, as Codex does.
Function tools only: a hosted tool (web search, file search, computer use, a namespace of tools)
cannot be run here and is refused naming it; images and files in input likewise.
``parallel_tool_calls``, ``include``, ``reasoning``, ``prompt_cache_key`` and ``metadata`` are
accepted and have no effect.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.call.call_input import ChatCall, Sampling
from gateway.call.chat_messages import joined_text, render_ready
from gateway.errors import InvalidRequestError, UnsupportedFieldError

Finite = Annotated[float, Field(allow_inf_nan=False)]
REASONING_MARK = "forge-rl:"
"""How this gateway's ``encrypted_content`` begins: the reasoning's text, base64, follows."""


class ResponsesRequest(BaseModel):
    """``POST /v1/responses``."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, max_length=256)
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_output_tokens: int | None = Field(default=None, ge=1, le=2**31 - 1)
    temperature: Finite | None = Field(default=None, ge=0, le=2)
    top_p: Finite | None = Field(default=None, gt=0, le=1)
    parallel_tool_calls: bool | None = None
    store: bool | None = None
    stream: bool = False
    include: list[str] | None = None
    reasoning: dict[str, Any] | None = None
    previous_response_id: str | None = None
    text: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _refuse_what_cannot_be_honoured(self) -> ResponsesRequest:
        if self.previous_response_id:
            raise UnsupportedFieldError(
                "previous_response_id",
                "this gateway stores no responses; send the full conversation as input",
            )
        return self


def encrypted_reasoning(text: str) -> str:
    """A reasoning item's ``encrypted_content``: clients keep it opaque and send it back."""
    return REASONING_MARK + base64.b64encode(text.encode()).decode()


def _reasoning_text(item: Mapping[str, Any]) -> str:
    sealed = item.get("encrypted_content")
    if isinstance(sealed, str) and sealed.startswith(REASONING_MARK):
        try:
            return base64.b64decode(sealed.removeprefix(REASONING_MARK)).decode()
        except ValueError:
            return ""
    parts = [*(item.get("content") or []), *(item.get("summary") or [])]
    return "\n".join(
        p["text"] for p in parts if isinstance(p, Mapping) and isinstance(p.get("text"), str)
    )


def _assistant(out: list[dict[str, Any]]) -> dict[str, Any]:
    """The assistant message function calls and reasoning join: the last one, if it is still
    open (no tool result or user turn since), else a new one."""
    if out and out[-1]["role"] == "assistant":
        return out[-1]
    out.append({"role": "assistant", "content": "", "tool_calls": []})
    return out[-1]


def _add_item(out: list[dict[str, Any]], item: Mapping[str, Any], where: str) -> None:
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role")
        text = joined_text(item.get("content"), f"{where}.content")
        if role == "assistant":
            turn = _assistant(out)
            turn["content"] = f"{turn['content']}\n{text}" if turn["content"] else text
        else:
            out.append({"role": role, "content": text})
    elif kind == "function_call":
        call = {
            "id": str(item.get("call_id") or ""),
            "type": "function",
            "function": {"name": item.get("name"), "arguments": item.get("arguments", "")},
        }
        _assistant(out)["tool_calls"].append(call)  # fmt: skip
    elif kind == "function_call_output":
        output = joined_text(item.get("output") or "", f"{where}.output")
        out.append({"role": "tool", "tool_call_id": str(item.get("call_id") or ""),
                    "content": output})  # fmt: skip
    elif kind == "reasoning":
        # Reasoning precedes the message and calls of its turn: it opens that assistant turn.
        text = _reasoning_text(item)
        if text:
            out.append({"role": "assistant", "content": "", "tool_calls": [],
                        "reasoning_content": text})  # fmt: skip
    else:
        raise InvalidRequestError(
            f"input item type {kind!r} cannot be taken (messages, function calls and their "
            "outputs, reasoning)",
            param=f"{where}.type",
        )


def chat_messages(body: ResponsesRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if body.instructions:
        out.append({"role": "system", "content": body.instructions})
    if isinstance(body.input, str):
        return [*out, {"role": "user", "content": body.input}]
    for i, item in enumerate(body.input):
        if not isinstance(item, Mapping):
            raise InvalidRequestError("an input item must be an object", param=f"input.{i}")
        _add_item(out, item, f"input.{i}")
    return out


def chat_tools(body: ResponsesRequest) -> list[dict[str, Any]] | None:
    """Function tools in Chat Completions' shape; any other tool refused, naming it."""
    if not body.tools:
        return None
    tools = []
    for i, tool in enumerate(body.tools):
        if tool.get("type") != "function" or not isinstance(tool.get("name"), str):
            raise InvalidRequestError(
                f"tool type {tool.get('type')!r} cannot be run by this gateway (function tools "
                "only)",
                param=f"tools.{i}.type",
            )
        function = {"name": tool["name"], "description": tool.get("description") or "",
                    "parameters": tool.get("parameters") or {"type": "object"}}  # fmt: skip
        tools.append({"type": "function", "function": function})
    return tools


def responses_chat_call(body: ResponsesRequest) -> ChatCall:
    """A Responses request in the gateway's own terms."""
    choice = body.tool_choice if body.tool_choice is not None else "auto"
    forced, name = _forced_tool(choice)
    as_json, schema = _text_format(body)
    sampling = Sampling(max_tokens=body.max_output_tokens, temperature=body.temperature,
                        top_p=body.top_p)  # fmt: skip
    return ChatCall(
        endpoint="responses",
        model=body.model,
        messages=render_ready(chat_messages(body)),
        tools=chat_tools(body),
        sampling=sampling,
        tools_enabled=choice != "none",
        forced_tool=forced,
        tool_name=name,
        json_output=as_json,
        json_schema=schema,
        format_param="text.format",
    )


def _forced_tool(choice: Any) -> tuple[bool, str | None]:
    """(forced, the function named) of a Responses ``tool_choice``."""
    if choice in ("auto", "none"):
        return False, None
    if choice == "required":
        return True, None
    named = isinstance(choice, Mapping) and choice.get("type") == "function"
    if named and isinstance(choice.get("name"), str):
        return True, choice["name"]
    raise InvalidRequestError(
        "tool_choice must be auto, none, required or {type: function, name}", param="tool_choice"
    )


def _text_format(body: ResponsesRequest) -> tuple[bool, Any]:
    """(JSON asked, its schema) of ``text.format``."""
    spec = (body.text or {}).get("format") or {"type": "text"}
    kind = spec.get("type") if isinstance(spec, Mapping) else None
    if kind == "text":
        return False, None
    if kind == "json_object":
        return True, None
    if kind == "json_schema" and isinstance(spec.get("schema"), dict):
        return True, spec["schema"]
    raise InvalidRequestError(
        "text.format must be text, json_object, or json_schema with its schema",
        param="text.format",
    )
