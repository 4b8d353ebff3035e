"""Three dialects, one call (issue 55): the Anthropic Messages and OpenAI Responses APIs through
their official SDKs — plain, streamed, with a tool round trip — recorded as Chat Completions'
calls are; the same conversation in each dialect renders the same prompt tokens; a history sent
back as answered extends the sampled tokens; refusals in each dialect's own shape."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest

from gateway.app import create_app
from gateway.config import GatewaySettings
from schemas.records import ModelRequest, ModelResponse
from tests.memory_event_log import MemoryEventLog
from tests.scripted_engine import ScriptedEngine
from tests.unit.gateway.conftest import ADMIN, ADMIN_KEY

TOOL_CALL = '<tool_call>\n{"name": "guess", "arguments": {"n": 5}}\n</tool_call>'
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
CHAT_TOOLS = [{"type": "function", "function": {"name": "guess", "description": "Guess.",
                                                "parameters": SCHEMA}}]  # fmt: skip
ANTHROPIC_TOOLS = [{"name": "guess", "description": "Guess.", "input_schema": SCHEMA}]
RESPONSES_TOOLS = [{"type": "function", "name": "guess", "description": "Guess.",
                    "parameters": SCHEMA}]  # fmt: skip


@dataclass
class Gw:
    http: httpx.AsyncClient
    anthropic_http: httpx2.AsyncClient
    """The Anthropic SDK's own HTTP client library, on the same app."""
    log: MemoryEventLog
    engine: ScriptedEngine


@contextlib.asynccontextmanager
async def scripted_gateway(model_dir) -> AsyncIterator[Gw]:
    settings = GatewaySettings(admin_key=ADMIN_KEY, port=8000, model_dir=model_dir,
                               follow_policy=False, max_context_tokens=2048,
                               default_max_tokens=8)  # fmt: skip
    engine = ScriptedEngine(model_dir, max_batch_size=4, batch_wait_ms=1, max_context=2048)
    log = MemoryEventLog()
    app = create_app(settings, engine, log)
    transport, transport2 = httpx.ASGITransport(app=app), httpx2.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http,
        httpx2.AsyncClient(transport=transport2, base_url="http://127.0.0.1:8000") as http2,
    ):
        yield Gw(http, http2, log, engine)


@pytest.fixture
async def gw(tiny_policy):
    async with scripted_gateway(tiny_policy) as running:
        yield running


async def new_rollout(http: httpx.AsyncClient) -> dict[str, Any]:
    response = await http.post("/rollouts", json={"task_id": "t"}, headers=ADMIN)
    assert response.status_code == 200, response.text
    return response.json()


def claude(gw: Gw, rollout: dict[str, Any]) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=rollout["anthropic_base_url"],
                                    api_key=rollout["api_key"], http_client=gw.anthropic_http,
                                    max_retries=0)  # fmt: skip


def gpt(http: httpx.AsyncClient, rollout: dict[str, Any]) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=rollout["base_url"], api_key=rollout["api_key"],
                              http_client=http, max_retries=0)  # fmt: skip


def recorded(log: MemoryEventLog, rollout: dict[str, Any], kind: type) -> list[Any]:
    return [e.payload for e in log.envelopes(rollout["rollout_id"]) if isinstance(e.payload, kind)]


async def test_messages_plain_and_streamed_through_the_anthropic_sdk(gw):
    http, log, engine = gw.http, gw.log, gw.engine
    engine.script = iter(["<think>\nhalve it\n</think>\n\nfive", "six"])
    rollout = await new_rollout(http)
    client = claude(gw, rollout)
    message = await client.messages.create(
        model="m", max_tokens=16, system=[{"type": "text", "text": "Be brief."}],
        messages=[{"role": "user", "content": "Say a digit."}],
    )  # fmt: skip
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[0].thinking == "halve it" and message.content[1].text == "five"
    assert message.stop_reason == "end_turn" and message.usage.output_tokens > 0
    async with client.messages.stream(
        model="m", max_tokens=16, messages=[{"role": "user", "content": "Again."}]
    ) as stream:
        final = await stream.get_final_message()
    assert [b.type for b in final.content] == ["text"] and final.content[0].text == "six"
    requests = recorded(log, rollout, ModelRequest)
    assert [r.endpoint for r in requests] == ["messages", "messages"]
    prompt = engine.tokenizer.decode(requests[0].prompt_token_ids.tolist())
    assert prompt.startswith("<|im_start|>system\nBe brief.<|im_end|>")


async def test_messages_tool_round_trip_with_an_error_flag(gw):
    http, log, engine = gw.http, gw.log, gw.engine
    engine.script = iter([f"I guess.\n{TOOL_CALL}", "done"])
    rollout = await new_rollout(http)
    client = claude(gw, rollout)
    asked = [{"role": "user", "content": "Find the digit."}]
    first = await client.messages.create(model="m", max_tokens=64, tools=ANTHROPIC_TOOLS,
                                         messages=asked)  # fmt: skip
    assert first.stop_reason == "tool_use"
    use = next(b for b in first.content if b.type == "tool_use")
    assert (use.name, use.input) == ("guess", {"n": 5})
    history = [*asked, {"role": "assistant", "content": [b.model_dump() for b in first.content]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                             "content": "exit 2", "is_error": True}]}]  # fmt: skip
    await client.messages.create(model="m", max_tokens=8, tools=ANTHROPIC_TOOLS, messages=history)
    [_, second] = recorded(log, rollout, ModelRequest)
    [result] = second.tool_results
    assert (result.tool_call_id, result.content, result.is_error) == (use.id, "exit 2", True)
    [answered, _] = recorded(log, rollout, ModelResponse)
    # the history sent back as answered: the second prompt extends the first call's tokens
    assert second.parent_call_id == answered.call_id and not second.retokenization_drift
    first_prompt = recorded(log, rollout, ModelRequest)[0].prompt_len
    assert second.shared_prefix_len == first_prompt + answered.completion_token_ids.shape[0]


async def test_count_tokens_answers_from_the_same_rendering(gw):
    http, log, engine = gw.http, gw.log, gw.engine
    engine.script = iter(["ok"])
    rollout = await new_rollout(http)
    client = claude(gw, rollout)
    asked = {"model": "m", "system": "Be brief.", "tools": ANTHROPIC_TOOLS,
             "messages": [{"role": "user", "content": "Count me."}]}  # fmt: skip
    counted = await client.messages.count_tokens(**asked)
    await client.messages.create(max_tokens=4, **asked)
    [request] = recorded(log, rollout, ModelRequest)
    assert counted.input_tokens == request.prompt_len


async def test_responses_plain_streamed_and_a_function_call_round_trip(gw):
    http, log, engine = gw.http, gw.log, gw.engine
    engine.script = iter(["<think>\nhalve it\n</think>\n\nfive", "six", TOOL_CALL, "done"])
    rollout = await new_rollout(http)
    client = gpt(http, rollout)
    reply = await client.responses.create(model="m", input="Say a digit.", instructions="Brief.")
    assert reply.output_text == "five" and [i.type for i in reply.output] == [
        "reasoning",
        "message",
    ]
    stream = await client.responses.create(model="m", input="Again.", stream=True)
    kinds = [event.type async for event in stream]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds and "response.output_item.done" in kinds
    asked = [{"role": "user", "content": [{"type": "input_text", "text": "Find the digit."}]}]
    called = await client.responses.create(model="m", input=asked, tools=RESPONSES_TOOLS)
    [call] = [i for i in called.output if i.type == "function_call"]
    assert (call.name, json.loads(call.arguments)) == ("guess", {"n": 5})
    history = [
        *asked,
        *(i.model_dump() for i in called.output),
        {"type": "function_call_output", "call_id": call.call_id, "output": "higher"},
    ]
    await client.responses.create(model="m", input=history, tools=RESPONSES_TOOLS)
    requests = recorded(log, rollout, ModelRequest)
    assert [r.endpoint for r in requests] == ["responses"] * 4
    assert [(r.tool_call_id, r.content) for r in requests[3].tool_results] == [
        (call.call_id, "higher")
    ]
    answered = recorded(log, rollout, ModelResponse)[2]
    assert requests[3].parent_call_id == answered.call_id and not requests[3].retokenization_drift
    assert requests[3].shared_prefix_len == requests[2].prompt_len + len(
        answered.completion_token_ids
    )


async def test_one_conversation_in_three_dialects_renders_one_prompt(gw):
    """system, user, an assistant tool call, its result, user: the same prompt token ids from
    Chat Completions, Messages and Responses."""
    http, log, engine = gw.http, gw.log, gw.engine
    engine.script = iter(["a", "b", "c"])
    system, question, answer, result, more = (
        "You find digits.", "Find it.", "I guess five.", "higher", "Go on.")  # fmt: skip
    chat = [{"role": "system", "content": system}, {"role": "user", "content": question},
            {"role": "assistant", "content": answer, "tool_calls": [{"id": "c1", "type":
             "function", "function": {"name": "guess", "arguments": '{"n": 5}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": result},
            {"role": "user", "content": more}]  # fmt: skip
    messages = [{"role": "user", "content": question},
                {"role": "assistant", "content": [{"type": "text", "text": answer},
                 {"type": "tool_use", "id": "c1", "name": "guess", "input": {"n": 5}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1",
                                              "content": result},
                                             {"type": "text", "text": more}]}]  # fmt: skip
    items = [{"role": "user", "content": question},
             {"type": "message", "role": "assistant",
              "content": [{"type": "output_text", "text": answer}]},
             {"type": "function_call", "call_id": "c1", "name": "guess", "arguments": '{"n": 5}'},
             {"type": "function_call_output", "call_id": "c1", "output": result},
             {"role": "user", "content": more}]  # fmt: skip
    prompts = []
    for send in (
        lambda r: gpt(http, r).chat.completions.create(model="m", messages=chat,
                                                       tools=CHAT_TOOLS, max_tokens=2),
        lambda r: claude(gw, r).messages.create(model="m", system=system, messages=messages,
                                                  tools=ANTHROPIC_TOOLS, max_tokens=2),
        lambda r: gpt(http, r).responses.create(model="m", instructions=system, input=items,
                                                tools=RESPONSES_TOOLS, max_output_tokens=2),
    ):  # fmt: skip
        rollout = await new_rollout(http)
        await send(rollout)
        [request] = recorded(log, rollout, ModelRequest)
        prompts.append((request.prompt_token_ids.tolist(), request.tool_results))
    assert prompts[0] == prompts[1] == prompts[2]
    requests = [e.payload for e in log.envelopes() if isinstance(e.payload, ModelRequest)]
    assert [r.endpoint for r in requests] == [
        "chat.completions", "messages", "responses"]  # fmt: skip


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "AAAA"}}]}]}, "messages.0.content.0.type"),
        ({"messages": [{"role": "user", "content": "hi"}],
          "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools.0.type"),
        ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, "max_tokens"),
    ],
)  # fmt: skip
async def test_messages_refusals_have_anthropics_shape_and_leave_no_trace(gw, body, param):
    http, log = gw.http, gw.log
    rollout = await new_rollout(http)
    response = await http.post(
        "/v1/messages?beta=true", json={"model": "m", "max_tokens": 8, **body},
        headers={"x-api-key": rollout["api_key"], "anthropic-version": "2023-06-01"},
    )  # fmt: skip
    assert response.status_code == 400, response.text
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert error["error"]["message"].startswith(param)
    assert recorded(log, rollout, ModelRequest) == []
    unauthorized = await http.post("/v1/messages", json={"model": "m", "max_tokens": 1,
                                                         "messages": []})  # fmt: skip
    assert unauthorized.status_code == 401
    assert unauthorized.json()["error"]["type"] == "authentication_error"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"tools": [{"type": "web_search"}]}, "tools.0.type"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
         "input.0.content.0.type"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input.0.type"),
    ],
)  # fmt: skip
async def test_responses_refusals_name_the_field_and_leave_no_trace(gw, fields, param):
    http, log = gw.http, gw.log
    rollout = await new_rollout(http)
    response = await http.post(
        f"/rollouts/{rollout['rollout_id']}/v1/responses",
        json={"model": "m", "input": "hi", **fields},
        headers={"Authorization": f"Bearer {rollout['api_key']}"},
    )  # fmt: skip
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
    assert recorded(log, rollout, ModelRequest) == []
