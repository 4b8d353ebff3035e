"""The gateway as a black-box agent sees it: the official openai SDK against a real server."""

from __future__ import annotations

import time

import httpx
import numpy as np
import openai
import pytest

from infra.tiny_model import save_tiny_policy
from schemas.records import (
    ModelRequest,
    ModelResponse,
    RolloutAborted,
    RolloutFinished,
    RolloutStarted,
)
from tests.gateway_harness import ADMIN_KEY, running_gateway

pytestmark = pytest.mark.integration

CHAT = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 3 * 7?"},
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_policy(tmp_path_factory.mktemp("policy") / "base")


@pytest.fixture(scope="module")
def gw(kafka, model_dir):
    with running_gateway(kafka, model_dir, max_body_bytes=64 * 1024) as running:
        yield running


def payloads(gw, rollout_id, kind):
    return [e.payload for e in gw.events_of(rollout_id) if isinstance(e.payload, kind)]


def test_sync_sdk_chat_call_is_captured_exactly(gw):
    rollout = gw.new_rollout(group_size=1, metadata={"split": "test"})
    client = openai.OpenAI(base_url=rollout["base_url"], api_key=rollout["api_key"])
    reply = client.chat.completions.create(
        model="forge-policy", messages=CHAT, max_tokens=8, seed=1
    )
    assert reply.choices[0].message.role == "assistant"
    (request,) = payloads(gw, rollout["rollout_id"], ModelRequest)
    (response,) = payloads(gw, rollout["rollout_id"], ModelResponse)
    expected = gw.engine.tokenizer.encode_chat(CHAT)
    np.testing.assert_array_equal(request.prompt_token_ids, expected)
    assert request.parent_call_id is None and request.prompt_len == len(expected)
    assert reply.usage.prompt_tokens == len(expected)
    assert response.call_id == request.call_id
    assert (
        len(response.completion_token_ids)
        == reply.usage.completion_tokens
        == len(response.logprobs)
    )
    assert np.all(response.logprobs <= 0)
    assert response.policy_version == 0
    (started,) = payloads(gw, rollout["rollout_id"], RolloutStarted)
    assert started.metadata == {"split": "test"}


async def test_async_sdk_streaming_matches_non_streaming(gw):
    first, second = gw.new_rollout(), gw.new_rollout()
    plain = openai.AsyncOpenAI(base_url=first["base_url"], api_key=first["api_key"])
    streamed = openai.AsyncOpenAI(base_url=second["base_url"], api_key=second["api_key"])
    whole = await plain.chat.completions.create(
        model="m", messages=CHAT, max_tokens=12, seed=5, temperature=0.8
    )
    stream = await streamed.chat.completions.create(
        model="m", messages=CHAT, max_tokens=12, seed=5, temperature=0.8, stream=True
    )
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == (whole.choices[0].message.content or "")


def test_completions_endpoint_with_text_and_token_prompts_and_n(gw):
    rollout = gw.new_rollout()
    client = openai.OpenAI(base_url=rollout["base_url"], api_key=rollout["api_key"])
    text = client.completions.create(model="m", prompt="the quick brown", max_tokens=5, n=2, seed=3)
    assert len(text.choices) == 2
    tokens = client.completions.create(model="m", prompt=[5, 6, 7, 8], max_tokens=4)
    assert tokens.usage.prompt_tokens == 4
    responses = payloads(gw, rollout["rollout_id"], ModelResponse)
    assert sorted(r.choice_index for r in responses) == [0, 0, 1]
    assert [m.id for m in client.models.list().data] == ["forge-policy"]


def test_tools_are_rendered_and_tool_results_pass_through(gw):
    rollout = gw.new_rollout()
    client = openai.OpenAI(base_url=rollout["base_url"], api_key=rollout["api_key"])
    tools = [
        {"type": "function", "function": {"name": "calculator", "parameters": {"type": "object"}}}
    ]
    history = [
        *CHAT,
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "calculator", "arguments": '{"expression": "3*7"}'},
        }]},
        {"role": "tool", "tool_call_id": "call_1", "content": "21"},
    ]  # fmt: skip
    reply = client.chat.completions.create(
        model="m", messages=history, tools=tools, tool_choice="auto", max_tokens=6
    )
    assert reply.choices[0].finish_reason in {"stop", "length", "tool_calls"}
    (request,) = payloads(gw, rollout["rollout_id"], ModelRequest)
    prompt = gw.engine.tokenizer.decode(request.prompt_token_ids)
    assert "calculator" in prompt and '"expression"' in prompt
    assert "<tool_response>\n21\n</tool_response>" in prompt  # Qwen3's tool turn


def test_second_call_is_delta_encoded_against_the_first(gw):
    rollout = gw.new_rollout()
    client = openai.OpenAI(base_url=rollout["base_url"], api_key=rollout["api_key"])
    first = client.chat.completions.create(model="m", messages=CHAT, max_tokens=6, seed=2)
    follow = [
        *CHAT,
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "user", "content": "and 4 * 5?"},
    ]
    client.chat.completions.create(model="m", messages=follow, max_tokens=6, seed=2)
    req1, req2 = payloads(gw, rollout["rollout_id"], ModelRequest)
    resp1 = payloads(gw, rollout["rollout_id"], ModelResponse)[0]
    parent_seq = np.concatenate([req1.prompt_token_ids, resp1.completion_token_ids])
    assert req2.parent_call_id == req1.call_id
    rebuilt = np.concatenate([parent_seq[: req2.shared_prefix_len], req2.prompt_token_ids])
    expected = gw.engine.tokenizer.encode_chat(follow)
    np.testing.assert_array_equal(rebuilt, expected)
    assert req2.retokenization_drift == (req2.shared_prefix_len < parent_seq.shape[0])
    assert req2.prompt_token_ids.shape[0] < len(expected)


def test_rollout_addressing_by_header_and_by_key(gw):
    rollout = gw.new_rollout()
    by_header = openai.OpenAI(
        base_url=f"{gw.url}/v1",
        api_key=ADMIN_KEY,
        default_headers={"X-Forge-Rollout": rollout["rollout_id"]},
    )
    by_header.chat.completions.create(model="m", messages=CHAT, max_tokens=2)
    by_key = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=rollout["api_key"])
    by_key.chat.completions.create(model="m", messages=CHAT, max_tokens=2)
    assert len(payloads(gw, rollout["rollout_id"], ModelRequest)) == 2


def test_signals_finish_and_closed_rollout(gw):
    rollout = gw.new_rollout()
    key = {"Authorization": f"Bearer {rollout['api_key']}"}
    rid = rollout["rollout_id"]
    with httpx.Client(base_url=gw.url, headers=key) as client:
        assert (
            client.post(
                f"/rollouts/{rid}/signals", json=[{"step": 0, "name": "ok", "value": 0.5}]
            ).status_code
            == 200
        )
        assert (
            client.post(
                f"/rollouts/{rid}/finish", json={"status": "success", "outcome_reward": 1.0}
            ).status_code
            == 200
        )
        again = client.post(f"/rollouts/{rid}/finish", json={"status": "success"})
        assert again.status_code == 409 and again.json()["error"]["type"] == "conflict_error"
    agent = openai.OpenAI(base_url=rollout["base_url"], api_key=rollout["api_key"])
    with pytest.raises(openai.ConflictError):
        agent.chat.completions.create(model="m", messages=CHAT, max_tokens=2)
    (finished,) = payloads(gw, rid, RolloutFinished)
    assert finished.outcome_reward == 1.0


def test_abort_closes_the_rollout_with_its_reason(gw):
    rollout = gw.new_rollout()
    rid = rollout["rollout_id"]
    with gw.admin() as client:
        assert client.post(f"/rollouts/{rid}/abort", json={}).status_code == 400
        assert client.post(f"/rollouts/{rid}/abort", json={"reason": "agent exited 3"}).is_success
        assert client.post(f"/rollouts/{rid}/finish", json={}).status_code == 409
    (aborted,) = payloads(gw, rid, RolloutAborted)
    assert aborted.reason == "agent exited 3"
    assert not payloads(gw, rid, RolloutFinished)


def test_bad_input_gets_clear_errors_and_writes_nothing(gw):
    rollout = gw.new_rollout()
    rid = rollout["rollout_id"]
    own = {"Authorization": f"Bearer {rollout['api_key']}", "content-type": "application/json"}
    other = gw.new_rollout()
    with httpx.Client(base_url=gw.url) as client:
        bad_json = client.post(
            f"/rollouts/{rid}/v1/chat/completions", content=b"{not json", headers=own
        )
        assert bad_json.status_code == 400 and "JSON" in bad_json.json()["error"]["message"]
        missing = client.post(
            f"/rollouts/{rid}/v1/chat/completions", json={"model": "m"}, headers=own
        )
        assert missing.status_code == 400 and missing.json()["error"]["param"] == "messages"
        bad_type = client.post(
            f"/rollouts/{rid}/v1/chat/completions",
            json={"model": "m", "messages": CHAT, "n": "many"},
            headers=own,
        )
        assert bad_type.status_code == 400
        unknown = client.post(
            "/rollouts/nope/v1/chat/completions",
            json={"model": "m", "messages": CHAT},
            headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        )
        assert unknown.status_code == 404
        huge = client.post(
            f"/rollouts/{rid}/v1/chat/completions", content=b"x" * (65 * 1024), headers=own
        )
        assert huge.status_code == 413
        foreign = client.post(
            f"/rollouts/{other['rollout_id']}/v1/chat/completions",
            json={"model": "m", "messages": CHAT},
            headers=own,
        )
        assert foreign.status_code == 403
        lifecycle = client.post("/rollouts", json={"task_id": "t"}, headers=own)
        assert lifecycle.status_code == 403
        anonymous = client.post(
            f"/rollouts/{rid}/v1/chat/completions", json={"model": "m", "messages": CHAT}
        )
        assert anonymous.status_code == 401
        too_long = client.post(  # a prompt that alone fills the context (max_tokens is lowered)
            f"/rollouts/{rid}/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "word " * 8000}]},
            headers=own,
        )
        assert too_long.status_code == 400 and too_long.json()["error"]["param"] == "messages"
    assert [type(e.payload) for e in gw.events_of(rid)] == [RolloutStarted]


def test_metrics_endpoint(gw):
    text = httpx.get(f"{gw.url}/metrics").text
    for name in (
        "forge_gateway_requests_total", "forge_gateway_request_seconds",
        "forge_gateway_tokens_total", "forge_gateway_retokenization_drift_total",
        "forge_gateway_produce_seconds", "forge_gateway_calls_in_flight",
    ):  # fmt: skip
        assert name in text


def test_unfinished_rollout_is_aborted_after_the_timeout(kafka, model_dir):
    with running_gateway(kafka, model_dir, rollout_timeout_s=1.0) as short:
        rollout = short.new_rollout()
        agent = openai.OpenAI(
            base_url=rollout["base_url"], api_key=rollout["api_key"], max_retries=0
        )
        time.sleep(2.5)
        with pytest.raises(openai.ConflictError):
            agent.chat.completions.create(model="m", messages=CHAT, max_tokens=2)
        kinds = [e.kind.value for e in short.events_of(rollout["rollout_id"])]
        assert kinds == ["ROLLOUT_STARTED", "ROLLOUT_ABORTED"]
