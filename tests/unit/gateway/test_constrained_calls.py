"""tool_choice and structured outputs honoured end to end on the tiny random policy (issue
53.2): the openai SDK's ``parse`` gets its Pydantic object, a forced or named tool choice gets
a call of that tool, in every dialect; the call records what constrained it and the unmasked
policy's log-probs."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anthropic
import httpx2
import numpy as np
import pytest
from pydantic import BaseModel, Field

from schemas.records import ModelRequest, ModelResponse
from tests.unit.gateway.conftest import AppUnderTest, app_under_test


class Guess(BaseModel):
    digit: int = Field(ge=0, le=9)
    sure: bool


BOUNDED = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
           "required": ["n"], "additionalProperties": False}  # fmt: skip
TOOLS = [{"type": "function", "function": {"name": "guess", "parameters": BOUNDED}},
         {"type": "function", "function": {"name": "stop", "parameters": {
             "type": "object", "properties": {}, "additionalProperties": False}}}]  # fmt: skip
ASKED = [{"role": "user", "content": "Guess the digit."}]


@pytest.fixture(scope="module")
async def gw(tiny_policy) -> AsyncIterator[AppUnderTest]:
    async with app_under_test(tiny_policy, max_context_tokens=2048, default_max_tokens=48) as app:
        yield app


def recorded(gw: AppUnderTest, rollout: dict, kind: type) -> list:
    return [
        e.payload for e in gw.log.envelopes(rollout["rollout_id"]) if isinstance(e.payload, kind)
    ]


async def test_parse_returns_the_pydantic_object_its_schema_holds(gw):
    rollout = await gw.new_rollout()
    reply = await gw.sdk(rollout).chat.completions.parse(
        model="m", messages=ASKED, response_format=Guess, max_tokens=48, seed=1
    )
    parsed = reply.choices[0].message.parsed
    assert isinstance(parsed, Guess) and 0 <= parsed.digit <= 9
    [request] = recorded(gw, rollout, ModelRequest)
    assert request.constraint == "json_schema"


async def test_a_forced_and_a_named_tool_choice_get_a_call_of_that_tool(gw):
    rollout = await gw.new_rollout()
    client = gw.sdk(rollout)
    forced = await client.chat.completions.create(
        model="m", messages=ASKED, tools=TOOLS, tool_choice="required", max_tokens=48, seed=2
    )
    named = await client.chat.completions.create(
        model="m", messages=ASKED, tools=TOOLS, max_tokens=48, seed=3,
        tool_choice={"type": "function", "function": {"name": "guess"}},
    )  # fmt: skip
    [call] = forced.choices[0].message.tool_calls
    assert call.function.name in ("guess", "stop")
    [named_call] = named.choices[0].message.tool_calls
    assert named_call.function.name == "guess" and named.choices[0].finish_reason == "tool_calls"
    requests = recorded(gw, rollout, ModelRequest)
    assert [r.constraint for r in requests] == ["tool_call", "tool_call:guess"]
    # the log-probs recorded are the unmasked policy's: as likely as the raw model finds them,
    # whatever the mask made certain (a forced marker token is sampled with probability 1)
    responses = recorded(gw, rollout, ModelResponse)
    assert all(np.all(r.logprobs <= 0) and np.any(r.logprobs < -1e-3) for r in responses)
    assert all(r.tool_calls[0].well_formed for r in responses)


async def test_the_other_dialects_force_calls_and_json_too(gw):
    rollout = await gw.new_rollout()
    transport = httpx2.ASGITransport(app=gw.app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as h2:
        claude = anthropic.AsyncAnthropic(base_url=rollout["anthropic_base_url"],
                                          api_key=rollout["api_key"], http_client=h2)  # fmt: skip
        message = await claude.messages.create(
            model="m", max_tokens=48, messages=ASKED, tool_choice={"type": "tool", "name": "guess"},
            tools=[{"name": "guess", "input_schema": BOUNDED}],
        )  # fmt: skip
        [use] = [b for b in message.content if b.type == "tool_use"]
        assert use.name == "guess" and 0 <= use.input["n"] <= 9
        # the round trip on the real engine: its call answered, the result sent back
        answered = {"role": "assistant", "content": [b.model_dump() for b in message.content]}
        result = {"type": "tool_result", "tool_use_id": use.id, "content": "higher"}
        history = [*ASKED, answered, {"role": "user", "content": [result]}]
        tools = [{"name": "guess", "input_schema": BOUNDED}]
        await claude.messages.create(model="m", max_tokens=8, messages=history, tools=tools)
    response = await gw.sdk(rollout).responses.create(
        model="m", input="Guess.", max_output_tokens=48,
        text={"format": {"type": "json_schema", "name": "guess", "schema": Guess.model_json_schema()
                         | {"additionalProperties": False}, "strict": True}},
    )  # fmt: skip
    assert Guess.model_validate_json(response.output_text).digit in range(10)
    called = await gw.sdk(rollout).responses.create(
        model="m", input="Guess.", max_output_tokens=48, tool_choice="required",
        tools=[{"type": "function", "name": "guess", "parameters": BOUNDED}],
    )  # fmt: skip
    [call] = [i for i in called.output if i.type == "function_call"]
    await gw.sdk(rollout).responses.create(
        model="m", max_output_tokens=8, tools=[{"type": "function", "name": "guess",
                                                "parameters": BOUNDED}],
        input=[{"role": "user", "content": "Guess."}, *(i.model_dump() for i in called.output),
               {"type": "function_call_output", "call_id": call.call_id, "output": "lower"}],
    )  # fmt: skip
    requests = recorded(gw, rollout, ModelRequest)
    assert [r.constraint for r in requests] == [
        "tool_call:guess", None, "json_schema", "tool_call", None]  # fmt: skip
    assert [(t.tool_call_id, t.content) for t in requests[1].tool_results] == [(use.id, "higher")]
    assert [(t.tool_call_id, t.content) for t in requests[4].tool_results] == [
        (call.call_id, "lower")]  # fmt: skip
    assert not any(r.retokenization_drift for r in requests)
