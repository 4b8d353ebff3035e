"""OpenAI wire format: request models the gateway validates, response bodies it builds."""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gateway.engine import Generation


class _Request(BaseModel):
    # Unknown OpenAI fields are accepted (SDKs add new ones); known ones are type-checked.
    model_config = ConfigDict(extra="allow")

    model: str
    n: int = Field(default=1, ge=1, le=16)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False

    def stop_list(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[dict[str, Any]] | None = None


class ChatCompletionRequest(_Request):
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_completion_tokens: int | None = Field(default=None, ge=1)

    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Request):
    prompt: str | list[int] | list[str]

    @field_validator("prompt")
    @classmethod
    def _single_prompt(cls, value: str | list[int] | list[str]) -> str | list[int] | list[str]:
        if isinstance(value, list) and value and isinstance(value[0], str) and len(value) != 1:
            raise ValueError("batched prompts are not supported; send one prompt per call")
        if isinstance(value, list) and not value:
            raise ValueError("prompt must not be empty")
        return value


TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


def split_tool_calls(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """Qwen/Hermes-style tool calls in generated text -> (remaining content, OpenAI tool_calls)."""
    calls = []
    for match in TOOL_CALL.finditer(text):
        try:
            parsed = json.loads(match.group(1))
        except json.JSONDecodeError:
            continue
        if not isinstance(parsed, dict) or "name" not in parsed:
            continue
        arguments = parsed.get("arguments", {})
        calls.append(
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {
                    "name": str(parsed["name"]),
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                },
            }
        )
    content = TOOL_CALL.sub("", text).strip() if calls else text
    return (content or None) if calls else content, calls


def assistant_message(generation: Generation, tools_enabled: bool) -> tuple[dict[str, Any], str]:
    """The OpenAI assistant message of one generation, and its finish_reason."""
    content, calls = split_tool_calls(generation.text) if tools_enabled else (generation.text, [])
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
        return message, "tool_calls"
    return message, generation.finish_reason


def usage(prompt_tokens: int, generations: list[Generation]) -> dict[str, int]:
    completion = sum(int(g.token_ids.shape[0]) for g in generations)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": prompt_tokens + completion,
    }


def chat_completion(
    call_id: str, model: str, messages: list[tuple[dict[str, Any], str]], usage_: dict[str, int]
) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{call_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": i, "message": m, "finish_reason": reason, "logprobs": None}
            for i, (m, reason) in enumerate(messages)
        ],
        "usage": usage_,
    }


def chat_chunks(
    call_id: str, model: str, messages: list[tuple[dict[str, Any], str]], usage_: dict[str, int]
) -> list[dict[str, Any]]:
    """The same answer as chat.completion.chunk objects (role, content, tool calls, finish)."""
    created = int(time.time())
    base = {"id": f"chatcmpl-{call_id}", "object": "chat.completion.chunk", "created": created,
            "model": model}  # fmt: skip
    chunks = []
    for i, (message, reason) in enumerate(messages):
        chunks.append({**base, "choices": [{"index": i, "delta": {"role": "assistant"}}]})
        if message.get("content"):
            delta = {"content": message["content"]}
            chunks.append({**base, "choices": [{"index": i, "delta": delta}]})
        for k, call in enumerate(message.get("tool_calls") or ()):
            delta = {"tool_calls": [{"index": k, **call}]}
            chunks.append({**base, "choices": [{"index": i, "delta": delta}]})
        chunks.append({**base, "choices": [{"index": i, "delta": {}, "finish_reason": reason}]})
    chunks.append({**base, "choices": [], "usage": usage_})
    return chunks


def text_completion(
    call_id: str, model: str, generations: list[Generation], usage_: dict[str, int]
) -> dict[str, Any]:
    return {
        "id": f"cmpl-{call_id}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": i, "text": g.text, "finish_reason": g.finish_reason, "logprobs": None}
            for i, g in enumerate(generations)
        ],
        "usage": usage_,
    }


def text_chunks(
    call_id: str, model: str, generations: list[Generation], usage_: dict[str, int]
) -> list[dict[str, Any]]:
    base = {"id": f"cmpl-{call_id}", "object": "text_completion", "created": int(time.time()),
            "model": model}  # fmt: skip
    chunks = []
    for i, g in enumerate(generations):
        chunks.append({**base, "choices": [{"index": i, "text": g.text, "finish_reason": None}]})
        choice = {"index": i, "text": "", "finish_reason": g.finish_reason}
        chunks.append({**base, "choices": [choice]})
    chunks.append({**base, "choices": [], "usage": usage_})
    return chunks


def error_body(message: str, error_type: str, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": param, "code": None}}
