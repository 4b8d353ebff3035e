"""Domains, tool use and truncation at the gateway, over a scripted engine: what the agent
sends and gets back, and what the log records."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from gateway.app import create_app
from gateway.config import GatewaySettings
from schemas.pipeline_file import PipelineFile, Truncation
from schemas.records import (
    TRUNCATED,
    ModelRequest,
    ModelResponse,
    RolloutFinished,
    RolloutStarted,
    ToolCall,
    ToolResult,
)
from tests.memory_event_log import MemoryEventLog
from tests.scripted_engine import ScriptedEngine
from tests.unit.gateway.conftest import ADMIN, ADMIN_KEY

TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
GOOD = '<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>'
UNKNOWN = '<tool_call>{"name": "rm", "arguments": {}}</tool_call>'
MALFORMED = "<tool_call>{search q}</tool_call>"


PIPELINE = PipelineFile.model_validate(
    {
        "domains": {
            "math": {"share": 0.5, "group_size": 3},
            "agent": {"share": 0.5, "truncation": Truncation(enabled=True, negative_steps=2)},
        }
    }
)


@contextlib.asynccontextmanager
async def gateway(model_dir) -> AsyncIterator[tuple[httpx.AsyncClient, MemoryEventLog, Any]]:
    settings = GatewaySettings(admin_key=ADMIN_KEY, port=8000, model_dir=model_dir,
                               follow_policy=False, max_context_tokens=256,
                               default_max_tokens=4)  # fmt: skip
    engine = ScriptedEngine(model_dir, max_batch_size=4, batch_wait_ms=1, max_context=256)
    log = MemoryEventLog()
    app = create_app(settings, engine, log, domains=PIPELINE.resolved_domains())
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http,
    ):
        yield http, log, engine


@pytest.fixture
async def gw(tiny_policy):
    async with gateway(tiny_policy) as running:
        yield running


async def start(http, **body):
    return await http.post("/rollouts", json={"task_id": "t", **body}, headers=ADMIN)


async def chat(http, rollout, messages, tools=TOOLS):
    headers = {"Authorization": f"Bearer {rollout['api_key']}"}
    body = {"model": "m", "messages": messages, "tools": tools, "max_tokens": 4}
    return await http.post(f"/rollouts/{rollout['rollout_id']}/v1/chat/completions",
                           json=body, headers=headers)  # fmt: skip


def payloads(log, rollout, kind):
    return [e.payload for e in log.envelopes(rollout["rollout_id"]) if isinstance(e.payload, kind)]


@pytest.mark.parametrize(
    ("domain", "message"),
    [("physics", "domain 'physics' is not in the pipeline file (its domains: agent, math)"),
     ("default", "domain 'default' is not in the pipeline file"),
     ("Math!", "domain: String should match pattern")],
)  # fmt: skip
async def test_a_domain_not_named_by_the_pipeline_file_is_400_naming_it(gw, domain, message):
    http, log, _ = gw
    answer = await start(http, domain=domain)
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "domain"
    assert message in answer.json()["error"]["message"]
    assert log.envelopes() == []


async def test_a_rollout_carries_its_domain_and_the_domains_group_size(gw):
    http, log, _ = gw
    rollout = (await start(http, domain="math")).json()
    assert (rollout["domain"], rollout["group_size"]) == ("math", 3)
    [started] = payloads(log, rollout, RolloutStarted)
    assert (started.domain, started.group_size) == ("math", 3)


async def test_tool_calls_and_results_are_recorded_with_the_ids_the_agent_got(gw):
    http, log, engine = gw
    engine.script = iter([f"{GOOD} {MALFORMED} {UNKNOWN}", "found it"])
    rollout = (await start(http, domain="math")).json()
    first = (await chat(http, rollout, [{"role": "user", "content": "hi"}])).json()
    message = first["choices"][0]["message"]
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["search", "rm"]
    assert message["content"] == MALFORMED  # never shown as a call
    good, unknown = (c["id"] for c in message["tool_calls"])
    history = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": message["content"], "tool_calls": message["tool_calls"]},
        {"role": "tool", "tool_call_id": good, "content": "Paris"},
        {"role": "tool", "tool_call_id": unknown, "content": "Error: unknown tool"},
    ]
    assert (await chat(http, rollout, history)).status_code == 200
    responses = payloads(log, rollout, ModelResponse)
    assert responses[0].tool_calls == [  # in the order the text has them
        ToolCall(good, "search", well_formed=True, known=True),
        ToolCall("", "", well_formed=False, known=False),
        ToolCall(unknown, "rm", well_formed=True, known=False),
    ]
    requests = payloads(log, rollout, ModelRequest)
    assert requests[0].tool_results == []
    assert requests[1].tool_results == [
        ToolResult(good, "Paris"), ToolResult(unknown, "Error: unknown tool")]  # fmt: skip


async def test_without_tools_offered_nothing_is_read_as_a_tool_call(gw):
    http, log, engine = gw
    engine.script = iter([GOOD])
    rollout = (await start(http, domain="math")).json()
    answer = (await chat(http, rollout, [{"role": "user", "content": "hi"}], tools=None)).json()
    assert answer["choices"][0]["message"]["content"] == GOOD
    assert payloads(log, rollout, ModelResponse)[0].tool_calls == []


async def test_a_plainly_failing_rollout_is_truncated_and_its_next_call_told_why(gw):
    http, log, engine = gw
    engine.script = iter([MALFORMED, "thinking", UNKNOWN, MALFORMED, "never"])
    rollout = (await start(http, domain="agent")).json()
    messages = [{"role": "user", "content": "go"}]
    for _ in range(4):  # bad, fine, bad, bad: two negative steps in a row after the fourth
        assert (await chat(http, rollout, messages)).status_code == 200
    refused = await chat(http, rollout, messages)
    assert refused.status_code == 409
    assert (
        "truncated: 2 consecutive steps with a negative process signal (steps 2-3)"
        in (refused.json()["error"]["message"])
    )
    [end] = payloads(log, rollout, RolloutFinished)
    assert (end.status, end.outcome_reward) == (TRUNCATED, None)
    assert end.reason.startswith("2 consecutive steps")
    auth = {"Authorization": f"Bearer {rollout['api_key']}"}
    finish = await http.post(f"/rollouts/{rollout['rollout_id']}/finish", json={}, headers=auth)
    assert finish.status_code == 409


async def test_the_tasks_signals_count_toward_truncation_and_win_over_tool_outcomes(gw):
    http, log, engine = gw
    engine.script = iter([MALFORMED, MALFORMED])
    rollout = (await start(http, domain="agent")).json()
    auth = {"Authorization": f"Bearer {rollout['api_key']}"}
    assert (await chat(http, rollout, [{"role": "user", "content": "go"}])).status_code == 200
    # the task says step 0 went well: the malformed call's penalty gives way
    await http.post(f"/rollouts/{rollout['rollout_id']}/signals",
                    json={"step": 0, "name": "ok", "value": 0.5}, headers=auth)  # fmt: skip
    assert (await chat(http, rollout, [{"role": "user", "content": "go"}])).status_code == 200
    assert payloads(log, rollout, RolloutFinished) == []
    await http.post(f"/rollouts/{rollout['rollout_id']}/signals",
                    json={"step": 0, "name": "undo", "value": -1.0}, headers=auth)  # fmt: skip
    [end] = payloads(log, rollout, RolloutFinished)
    assert end.status == TRUNCATED


async def test_a_domain_without_truncation_runs_out_however_badly(gw):
    http, log, engine = gw
    engine.script = iter([MALFORMED] * 4)
    rollout = (await start(http, domain="math")).json()
    for _ in range(4):
        assert (await chat(http, rollout, [{"role": "user", "content": "go"}])).status_code == 200
    assert payloads(log, rollout, RolloutFinished) == []


async def test_the_environment_may_end_a_rollout_as_truncated(gw):
    http, log, _ = gw
    rollout = (await start(http, domain="math")).json()
    auth = {"Authorization": f"Bearer {rollout['api_key']}"}
    done = await http.post(f"/rollouts/{rollout['rollout_id']}/finish",
                           json={"status": "truncated", "reason": "sandbox died"},
                           headers=auth)  # fmt: skip
    assert done.json()["status"] == TRUNCATED
    [end] = payloads(log, rollout, RolloutFinished)
    assert (end.status, end.reason) == (TRUNCATED, "sandbox died")


def test_a_tool_call_block_never_closed_is_malformed():
    from gateway.call.tool_calls import parse_completion

    parsed = parse_completion('ok <tool_call>{"name": "search"', frozenset({"search"}))
    assert parsed.calls == [] and parsed.content == 'ok <tool_call>{"name": "search"'
    assert parsed.recorded == [ToolCall("", "", well_formed=False, known=False)]


async def test_the_mix_names_the_domain_to_start_and_refuses_one_over_its_share(gw):
    http, _, _ = gw
    standing = (await http.get("/rollouts/next-domain", headers=ADMIN)).json()
    assert standing["domain"] == "agent"  # equal shares, nothing held: by name
    assert standing["domains"]["math"] == {
        "share": 0.5, "trained": 0, "held": 0, "deficit": 0.0, "group_size": 3}  # fmt: skip
    assert (await start(http, domain="agent", group_id="a1", group_size=2)).status_code == 200
    assert (await http.get("/rollouts/next-domain", headers=ADMIN)).json()["domain"] == "math"
    # math asked for nothing yet: agent may go on alone
    assert (await start(http, domain="agent", group_id="a2", group_size=2)).status_code == 200
    assert (await start(http, domain="math", group_id="m1", group_size=1)).status_code == 200
    refused = await start(http, domain="agent", group_id="a3", group_size=2)
    assert refused.status_code == 429 and refused.json()["error"]["param"] == "domain"
    assert "while math is under its share; start math" in refused.json()["error"]["message"]
    # a member of an admitted group always gets in
    assert (await start(http, domain="agent", group_id="a2", group_size=2)).status_code == 200
    assert (await http.get("/rollouts/next-domain")).status_code == 401


async def test_signals_sent_with_the_finish_are_stored_with_it_in_one_write(gw):
    http, log, _ = gw
    rollout = (await start(http, domain="math")).json()
    auth = {"Authorization": f"Bearer {rollout['api_key']}"}
    writes = []
    append = log.append

    async def counted(group_id, envelopes):
        writes.append(len(envelopes))
        await append(group_id, envelopes)

    log.append = counted
    signals = [{"step": 0, "name": "a", "value": 0.5}, {"step": 1, "name": "b", "value": -0.1}]
    body = {"status": "solved", "outcome_reward": 1.0, "signals": signals}
    done = await http.post(f"/rollouts/{rollout['rollout_id']}/finish", json=body, headers=auth)
    assert done.status_code == 200 and writes == [3]
    kinds = [type(e.payload).__name__ for e in log.envelopes(rollout["rollout_id"])]
    assert kinds == ["RolloutStarted", "ProcessSignal", "ProcessSignal", "RolloutFinished"]


async def test_reasoning_reaches_the_agent_apart_and_the_sampled_tokens_are_recorded(gw):
    """Qwen3's ``<think>`` block: ``reasoning_content`` beside the content, first in the stream;
    the log keeps every sampled token, the reasoning's included."""
    http, log, engine = gw
    said = "<think>\nFive halves the range.\n</think>\n\nfive"
    engine.script = iter([said, said])
    rollout = (await start(http, domain="math")).json()
    answer = (await chat(http, rollout, [{"role": "user", "content": "hi"}], tools=None)).json()
    message = answer["choices"][0]["message"]
    assert message["reasoning_content"] == "Five halves the range."
    assert message["content"] == "five"
    [response] = payloads(log, rollout, ModelResponse)
    sampled = engine.tokenizer.decode(response.completion_token_ids.tolist())
    assert sampled == f"{said}<|im_end|>"
    headers = {"Authorization": f"Bearer {rollout['api_key']}"}
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    streamed = await http.post(f"/rollouts/{rollout['rollout_id']}/v1/chat/completions",
                               json=body, headers=headers)  # fmt: skip
    deltas = [json.loads(line[6:])["choices"][0]["delta"]
              for line in streamed.text.splitlines()
              if line.startswith("data: {")]  # fmt: skip
    said_parts = [d for d in deltas if "reasoning_content" in d or d.get("content")]
    assert said_parts == [{"reasoning_content": "Five halves the range."}, {"content": "five"}]
