"""OpenAI wire format: the response bodies and stream chunks the gateway builds (pure).

Log-probs returned to the agent are the ones recorded in the log: those of the raw policy
(before temperature and top-p), the π_old the trainer's importance ratio uses.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gateway.call.tool_calls import ParsedCompletion
from gateway.engines.engine import Generation

TokenText = Callable[[int], str]


def assistant_message(parsed: ParsedCompletion, finish_reason: str) -> tuple[dict[str, Any], str]:
    """The OpenAI assistant message of one parsed generation, and its finish_reason."""
    message: dict[str, Any] = {"role": "assistant", "content": parsed.content}
    if parsed.reasoning:
        message["reasoning_content"] = parsed.reasoning
    if parsed.calls:
        message["tool_calls"] = parsed.calls
        return message, "tool_calls"
    return message, finish_reason


def usage(prompt_tokens: int, generations: list[Generation]) -> dict[str, int]:
    completion = sum(int(g.token_ids.shape[0]) for g in generations)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": prompt_tokens + completion,
    }


def _entry(text: str, logprob: float) -> dict[str, Any]:
    return {"token": text, "logprob": logprob, "bytes": list(text.encode())}


def chat_logprobs(g: Generation, top_k: int | None, token_text: TokenText) -> dict[str, Any] | None:
    """``choices[i].logprobs`` of a chat completion, or None when not asked for."""
    if top_k is None:
        return None
    content = []
    for i, (token, logprob) in enumerate(
        zip(g.token_ids.tolist(), g.logprobs.tolist(), strict=True)
    ):
        entry = _entry(token_text(token), logprob)
        alternatives = g.top_logprobs[i] if g.top_logprobs is not None else ()
        entry["top_logprobs"] = [_entry(token_text(t), lp) for t, lp in alternatives[:top_k]]
        content.append(entry)
    return {"content": content, "refusal": None}


def text_logprobs(g: Generation, top_k: int | None, token_text: TokenText) -> dict[str, Any] | None:
    """``choices[i].logprobs`` of a text completion, or None when not asked for."""
    if top_k is None:
        return None
    tokens = [token_text(t) for t in g.token_ids.tolist()]
    offsets, at = [], 0
    for text in tokens:
        offsets.append(at)
        at += len(text)
    top = None
    if top_k > 0 and g.top_logprobs is not None:
        top = [{token_text(t): lp for t, lp in alts[:top_k]} for alts in g.top_logprobs]
    return {
        "tokens": tokens,
        "token_logprobs": g.logprobs.tolist(),
        "top_logprobs": top,
        "text_offset": offsets,
    }


def chat_completion(
    call_id: str,
    model: str,
    answers: list[tuple[dict[str, Any], str, dict[str, Any] | None]],
    usage_: dict[str, int],
) -> dict[str, Any]:
    """``answers``: (message, finish_reason, logprobs) per choice."""
    return {
        "id": f"chatcmpl-{call_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": i, "message": m, "finish_reason": reason, "logprobs": lp}
            for i, (m, reason, lp) in enumerate(answers)
        ],
        "usage": usage_,
    }


def chat_chunks(
    call_id: str,
    model: str,
    answers: list[tuple[dict[str, Any], str, dict[str, Any] | None]],
    usage_: dict[str, int] | None,
) -> list[dict[str, Any]]:
    """The same answer as chat.completion.chunk objects; the usage chunk only when asked for
    (``stream_options.include_usage``), and then every chunk carries ``usage: null``."""
    created = int(time.time())
    base: dict[str, Any] = {"id": f"chatcmpl-{call_id}", "object": "chat.completion.chunk",
                            "created": created, "model": model}  # fmt: skip
    if usage_ is not None:
        base["usage"] = None
    chunks = []
    for i, (message, reason, logprobs) in enumerate(answers):
        chunks.append({**base, "choices": [{"index": i, "delta": {"role": "assistant"}}]})
        if message.get("reasoning_content"):
            delta = {"reasoning_content": message["reasoning_content"]}
            chunks.append({**base, "choices": [{"index": i, "delta": delta}]})
        if message.get("content"):
            choice = {"index": i, "delta": {"content": message["content"]}, "logprobs": logprobs}
            chunks.append({**base, "choices": [choice]})
        for k, call in enumerate(message.get("tool_calls") or ()):
            delta = {"tool_calls": [{"index": k, **call}]}
            chunks.append({**base, "choices": [{"index": i, "delta": delta}]})
        chunks.append({**base, "choices": [{"index": i, "delta": {}, "finish_reason": reason}]})
    if usage_ is not None:
        chunks.append({**base, "choices": [], "usage": usage_})
    return chunks


def text_completion(
    call_id: str,
    model: str,
    choices: list[tuple[Generation, dict[str, Any] | None]],
    usage_: dict[str, int],
) -> dict[str, Any]:
    return {
        "id": f"cmpl-{call_id}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": i, "text": g.text, "finish_reason": g.finish_reason, "logprobs": lp}
            for i, (g, lp) in enumerate(choices)
        ],
        "usage": usage_,
    }


def text_chunks(
    call_id: str,
    model: str,
    choices: list[tuple[Generation, dict[str, Any] | None]],
    usage_: dict[str, int] | None,
) -> list[dict[str, Any]]:
    base: dict[str, Any] = {"id": f"cmpl-{call_id}", "object": "text_completion",
                            "created": int(time.time()), "model": model}  # fmt: skip
    if usage_ is not None:
        base["usage"] = None
    chunks = []
    for i, (g, logprobs) in enumerate(choices):
        text = {"index": i, "text": g.text, "finish_reason": None, "logprobs": logprobs}
        chunks.append({**base, "choices": [text]})
        chunks.append(
            {**base, "choices": [{"index": i, "text": "", "finish_reason": g.finish_reason}]}
        )
    if usage_ is not None:
        chunks.append({**base, "choices": [], "usage": usage_})
    return chunks
