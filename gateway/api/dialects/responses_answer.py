"""OpenAI Responses answers: the ``response`` object and its stream events (pure).

The output items, in the order the model wrote them: a ``reasoning`` item (its text as
``reasoning_text`` content, and again in ``encrypted_content`` so an agent that keeps only that
— Codex does — sends it back), a ``message`` with one ``output_text`` part, one
``function_call`` per well-formed tool call. The stream is the same answer as the Responses
events, each with its ``sequence_number``: ``response.created``, ``response.in_progress``, per
item ``output_item.added`` … ``output_item.done`` (text deltas, function-call argument deltas,
reasoning deltas between), ``response.completed`` (or ``response.incomplete`` when max tokens
cut the answer).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gateway.api.dialects.responses_request import ResponsesRequest, encrypted_reasoning
from gateway.call.tool_calls import ParsedCompletion
from gateway.engines.engine import Generation


@dataclass(frozen=True)
class Answered:
    call_id: str
    model: str
    parsed: ParsedCompletion
    generation: Generation
    prompt_tokens: int


def output_items(answer: Answered) -> list[dict[str, Any]]:
    parsed, cid = answer.parsed, answer.call_id
    items: list[dict[str, Any]] = []
    if parsed.reasoning:
        items.append({
            "type": "reasoning", "id": f"rs_{cid}", "summary": [],
            "content": [{"type": "reasoning_text", "text": parsed.reasoning}],
            "encrypted_content": encrypted_reasoning(parsed.reasoning), "status": "completed",
        })  # fmt: skip
    if parsed.content:
        part = {"type": "output_text", "text": parsed.content, "annotations": [], "logprobs": []}
        items.append({"type": "message", "id": f"msg_{cid}", "role": "assistant",
                      "status": "completed", "content": [part]})  # fmt: skip
    for k, call in enumerate(parsed.calls):
        items.append({
            "type": "function_call", "id": f"fc_{cid}_{k}", "call_id": call["id"],
            "name": call["function"]["name"], "arguments": call["function"]["arguments"],
            "status": "completed",
        })  # fmt: skip
    return items


def response_object(answer: Answered, body: ResponsesRequest) -> dict[str, Any]:
    cut = answer.generation.finish_reason == "length" and not answer.parsed.calls
    output_tokens = int(answer.generation.token_ids.shape[0])
    return {
        "id": f"resp_{answer.call_id}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if cut else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "error": None,
        "model": answer.model,
        "output": output_items(answer),
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "parallel_tool_calls": body.parallel_tool_calls is not False,
        "previous_response_id": None,
        "reasoning": body.reasoning or {"effort": None, "summary": None},
        "store": False,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "text": {"format": {"type": "text"}},
        "tool_choice": body.tool_choice or "auto",
        "tools": body.tools or [],
        "truncation": "disabled",
        "metadata": {},
        "usage": {
            "input_tokens": answer.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": answer.prompt_tokens + output_tokens,
        },
    }


def _item_events(index: int, item: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """One output item's events, from added to done (sequence numbers set by the caller)."""
    base = {"output_index": index, "item_id": item["id"]}
    kind = item["type"]
    opened = {**item, "status": "in_progress"}
    if kind == "message":
        opened["content"] = []
    elif kind == "function_call":
        opened["arguments"] = ""
    elif kind == "reasoning":
        opened["content"] = []
    yield {"type": "response.output_item.added", "output_index": index, "item": opened}
    if kind == "message":
        part = item["content"][0]
        empty = {**part, "text": ""}
        yield {"type": "response.content_part.added", **base, "content_index": 0, "part": empty}
        yield {"type": "response.output_text.delta", **base, "content_index": 0,
               "delta": part["text"], "logprobs": []}  # fmt: skip
        yield {"type": "response.output_text.done", **base, "content_index": 0,
               "text": part["text"], "logprobs": []}  # fmt: skip
        yield {"type": "response.content_part.done", **base, "content_index": 0, "part": part}
    elif kind == "function_call":
        yield {"type": "response.function_call_arguments.delta", **base,
               "delta": item["arguments"]}  # fmt: skip
        yield {"type": "response.function_call_arguments.done", **base,
               "name": item["name"], "arguments": item["arguments"]}  # fmt: skip
    elif kind == "reasoning":
        text = item["content"][0]["text"]
        yield {"type": "response.reasoning_text.delta", **base, "content_index": 0, "delta": text}
        yield {"type": "response.reasoning_text.done", **base, "content_index": 0, "text": text}
    yield {"type": "response.output_item.done", "output_index": index, "item": item}


def response_events(response: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The answer ``response_object`` built, as the Responses stream's events."""
    opening = {**response, "status": "in_progress", "output": [], "usage": None,
               "incomplete_details": None}  # fmt: skip
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": opening},
        {"type": "response.in_progress", "response": opening},
    ]
    for index, item in enumerate(response["output"]):
        events += _item_events(index, item)
    ending = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
    events.append({"type": ending, "response": response})
    for number, event in enumerate(events):
        yield {**event, "sequence_number": number}


def sse(events: Iterator[dict[str, Any]]) -> Iterator[bytes]:
    for event in events:
        yield f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
