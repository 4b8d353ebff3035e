"""A session is one growing sequence (issue 56.4): per family, six tool turns where the agent
sends back what it was answered extend the sampled tokens every time (no drift); where the
agent re-serialises its tool calls' arguments, history is rendered again and a prompt that no
longer extends the sampled tokens is marked — never a silent break."""

from __future__ import annotations

import json
from collections import deque
from typing import Any

import numpy as np
import pytest

from gateway.call.call_input import ChatCall, Sampling, prepare_chat_call
from gateway.call.chat_messages import render_ready
from gateway.call.recorder import RECENT_CALLS, CallRecord, record_call
from gateway.config import GatewaySettings
from gateway.engines.engine import Generation
from schemas.records import ModelRequest
from tests.family_turns import ASKED, NAMES, TOOLS, tool_turn, written_turn

SETTINGS = GatewaySettings(admin_key="bridge-test-admin-key-0123", max_context_tokens=100_000)
TURNS = 6


def compact(arguments: str) -> str:
    """What some agents send back: the same JSON, written without spaces."""
    return json.dumps(json.loads(arguments), separators=(",", ":"))


async def session(family: Any, *, rewrite: bool) -> list[tuple[ModelRequest, int]]:
    """Six calls of one rollout; each call's request and its parent's sequence length."""
    name, tokenizer, renderer, _ = family
    recent: deque[CallRecord] = deque(maxlen=RECENT_CALLS)
    messages: list[dict[str, Any]] = [dict(m) for m in ASKED]
    out = []
    for turn in range(TURNS):
        chat = ChatCall("chat.completions", "m", render_ready(messages), TOOLS, Sampling(64))
        call = await prepare_chat_call(chat, renderer, SETTINGS, recent)
        ids = written_turn(tokenizer, name, messages, tool_turn(name, f"Guess {turn}."))
        generation = Generation(np.asarray(ids, dtype=np.int32), np.zeros(len(ids), np.float32),
                                tokenizer.decode(ids), "stop", 0)  # fmt: skip
        parsed = renderer.parse(ids, call.prompt.tolist(), TOOLS)
        parents = {(r.call_id, r.choice_index): r.sequence.shape[0] for r in recent}
        recorded = record_call(call, [generation], [parsed], recent, 1.0)
        request = recorded.events[0]
        assert isinstance(request, ModelRequest)
        out.append((request, parents.get((request.parent_call_id, 0), 0)))
        recent.extend(recorded.parents)
        returned = [
            {**c, "function": {**c["function"], "arguments": compact(c["function"]["arguments"])}}
            if rewrite else c
            for c in parsed.calls
        ]  # fmt: skip
        messages.append({"role": "assistant", "content": parsed.content, "tool_calls": returned})
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": f"not {turn}"}
                     for c in parsed.calls]  # fmt: skip
    return out


@pytest.mark.parametrize("family", NAMES, indirect=True)
async def test_six_tool_turns_sent_back_as_answered_extend_the_sampled_tokens(family):
    requests = await session(family, rewrite=False)
    assert [r.retokenization_drift for r, _ in requests] == [False] * TURNS
    for request, parent_len in requests[1:]:
        assert request.parent_call_id is not None
        assert request.shared_prefix_len == parent_len  # the whole earlier sequence, untouched


@pytest.mark.parametrize("family", NAMES, indirect=True)
async def test_rewritten_arguments_re_render_and_any_break_is_marked(family):
    requests = await session(family, rewrite=True)
    for request, parent_len in requests[1:]:
        assert request.retokenization_drift or request.shared_prefix_len == parent_len
    if family[0] in ("qwen3", "deepseek-v3", "kimi-k2"):  # arguments rendered as sent
        assert all(r.retokenization_drift for r, _ in requests[1:])
