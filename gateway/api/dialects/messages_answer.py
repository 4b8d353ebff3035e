"""Anthropic Messages answers: the ``message`` body and its server-sent events (pure).

A completion's reasoning is a ``thinking`` block (its signature an opaque mark of this gateway:
the agent sends it back untouched), its text a ``text`` block, each well-formed tool call a
``tool_use`` block whose ``input`` is the call's arguments as a JSON object. The stream is the
same answer as Anthropic's event sequence — ``message_start``, per block
``content_block_start``/``_delta``/``_stop``, ``message_delta`` with the stop reason and usage,
``message_stop`` — sent once the call's events are durable, as every dialect's stream is.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from gateway.call.tool_calls import ParsedCompletion
from gateway.engines.engine import Generation

SIGNATURE = "forge-rl"
"""A thinking block's signature: Anthropic's verifies its own model's reasoning; ours has none
to verify, and agents only send it back."""


def stop_reason(parsed: ParsedCompletion, generation: Generation) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) as Anthropic names why a turn ended."""
    if parsed.calls:
        return "tool_use", None
    if generation.finish_reason == "length":
        return "max_tokens", None
    if generation.matched_stop is not None:
        return "stop_sequence", generation.matched_stop
    return "end_turn", None


def _arguments(call: dict[str, Any]) -> Any:
    try:
        return json.loads(call["function"]["arguments"] or "{}")
    except ValueError:
        return {}


def content_blocks(parsed: ParsedCompletion) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if parsed.reasoning:
        blocks.append({"type": "thinking", "thinking": parsed.reasoning, "signature": SIGNATURE})
    if parsed.content:
        blocks.append({"type": "text", "text": parsed.content})
    for call in parsed.calls:
        blocks.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
                       "input": _arguments(call)})  # fmt: skip
    return blocks


def usage(prompt_tokens: int, generation: Generation) -> dict[str, int]:
    return {
        "input_tokens": prompt_tokens,
        "output_tokens": int(generation.token_ids.shape[0]),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def message_body(
    call_id: str, model: str, parsed: ParsedCompletion, generation: Generation, prompt_tokens: int
) -> dict[str, Any]:
    reason, sequence = stop_reason(parsed, generation)
    return {
        "id": f"msg_{call_id}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content_blocks(parsed),
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage(prompt_tokens, generation),
    }


def _block_events(index: int, block: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    kind = block["type"]
    start: dict[str, Any]
    if kind == "thinking":
        start = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [{"type": "thinking_delta", "thinking": block["thinking"]},
                  {"type": "signature_delta", "signature": block["signature"]}]  # fmt: skip
    elif kind == "text":
        start = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": block["text"]}]
    else:
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
    yield "content_block_start", {"type": "content_block_start", "index": index,
                                  "content_block": start}  # fmt: skip
    for delta in deltas:
        yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                      "delta": delta}  # fmt: skip
    yield "content_block_stop", {"type": "content_block_stop", "index": index}


def message_events(body: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The answer ``message_body`` built, as (event, data) pairs in Anthropic's order."""
    usage_ = body["usage"]
    start = {**body, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {**usage_, "output_tokens": 0}}  # fmt: skip
    yield "message_start", {"type": "message_start", "message": start}
    for index, block in enumerate(body["content"]):
        yield from _block_events(index, block)
    delta = {"stop_reason": body["stop_reason"], "stop_sequence": body["stop_sequence"]}
    yield "message_delta", {"type": "message_delta", "delta": delta,
                            "usage": {"output_tokens": usage_["output_tokens"]}}  # fmt: skip
    yield "message_stop", {"type": "message_stop"}


def sse(events: Iterator[tuple[str, dict[str, Any]]]) -> Iterator[bytes]:
    for event, data in events:
        yield f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()
