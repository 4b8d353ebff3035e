"""Content parts reach the model as the text they carry: the same conversation sent as strings
and as text parts records the same prompt token ids, for every role (issue 53.1)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from schemas.records import ModelRequest
from tests.gateway_conversations import TOOLS, tool_session
from tests.unit.gateway.conftest import AppUnderTest, app_under_test


@pytest.fixture(scope="module")
async def gw(tiny_policy) -> AsyncIterator[AppUnderTest]:
    """Room for a tool session's prompt."""
    async with app_under_test(tiny_policy, max_context_tokens=2048) as running:
        yield running


def as_parts(messages: list[dict]) -> list[dict]:
    out = []
    for message in messages:
        text = message.get("content") or ""
        head, _, tail = text.partition(" ")
        out.append({**message, "content": [{"type": "text", "text": head},
                                           {"type": "text", "text": tail}]})  # fmt: skip
    return out


def joined(messages: list[dict]) -> list[dict]:
    """What the parts of ``as_parts`` mean: their texts joined by a newline."""
    out = []
    for message in messages:
        head, _, tail = (message.get("content") or "").partition(" ")
        out.append({**message, "content": f"{head}\n{tail}"})
    return out


async def _prompt_ids(gw, messages: list[dict]) -> list[int]:
    rollout = await gw.new_rollout()
    await gw.sdk(rollout).chat.completions.create(
        model="m", messages=messages, tools=TOOLS, max_tokens=1, seed=1
    )
    [request] = [
        e.payload for e in gw.log.envelopes(rollout["rollout_id"])
        if isinstance(e.payload, ModelRequest)
    ]  # fmt: skip
    return request.prompt_token_ids.tolist()


async def test_text_parts_render_as_their_joined_text_for_every_role(gw):
    conversation = tool_session()
    roles = {m["role"] for m in conversation}
    assert roles == {"system", "user", "assistant", "tool"}
    as_strings = await _prompt_ids(gw, joined(conversation))
    assert await _prompt_ids(gw, as_parts(conversation)) == as_strings
    assert as_strings != await _prompt_ids(gw, conversation)  # the parts' text does count


async def test_a_developer_message_renders_as_system(gw):
    conversation = tool_session()
    as_developer = [{**conversation[0], "role": "developer"}, *conversation[1:]]
    assert await _prompt_ids(gw, as_developer) == await _prompt_ids(gw, conversation)
