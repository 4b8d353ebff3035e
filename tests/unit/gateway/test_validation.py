"""Hostile input: a 400 in OpenAI's error shape naming the field, and nothing in the log."""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from gateway.engines.embedded_engine import EmbeddedEngine
from gateway.engines.engine import SamplingParams
from gateway.errors import EngineError
from schemas.records import ModelRequest, RolloutStarted
from tests.unit.gateway.conftest import ADMIN, ADMIN_KEY, app_under_test

CHAT = [{"role": "user", "content": "What is 3 * 7?"}]


async def post_json(http, path, body, key=ADMIN_KEY):
    """JSON as Python writes it, NaN and Infinity included (httpx's json= refuses them)."""
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    return await http.post(path, content=json.dumps(body), headers=headers)


BAD_CHAT = [
    ({"seed": 10**30}, "seed"),
    ({"seed": -(2**63) - 1}, "seed"),
    ({"temperature": math.inf}, "temperature"),
    ({"temperature": math.nan}, "temperature"),
    ({"temperature": 2.5}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"top_p": math.nan}, "top_p"),
    ({"n": 17}, "n"),
    ({"n": "many"}, "n"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "word " * 300}]}, "messages"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"stop": ""}, "stop"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages.0.role"),
    ({"response_format": {"type": "json_schema"}}, "response_format"),  # no schema
    ({"response_format": {"type": "xml"}}, "response_format"),
    ({"logit_bias": {"5": 10}}, "logit_bias"),
    ({"presence_penalty": 0.5}, "presence_penalty"),
    ({"frequency_penalty": math.inf}, "frequency_penalty"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tool_choice": {"type": "function", "function": {"name": "f"}}}, "tool_choice"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"chat_template_kwargs": {"messages": []}}, "chat_template_kwargs"),
    (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "what is this?"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    ],
                }
            ]
        },
        "messages.0.content.1.type",
    ),
    (
        {"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]},
        "messages.0.content.0.type",
    ),
    (
        {"messages": [{"role": "user", "content": [{"type": "file", "file": {}}]}]},
        "messages.0.content.0.type",
    ),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages.0.content.0.text"),
    ({"messages": [{"role": "user", "content": "hi", "name": "bob"}]}, "messages.0.name"),
    (
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": None,
                    "function_call": {"name": "f", "arguments": "{}"},
                }
            ]
        },
        "messages.0.function_call",
    ),
]


@pytest.mark.parametrize(("fields", "param"), BAD_CHAT, ids=lambda v: str(v)[:40])
async def test_bad_chat_fields_are_400_naming_the_field(gw, fields, param):
    rollout = await gw.new_rollout()
    body = {"model": "m", "messages": CHAT, "max_tokens": 2, **fields}
    response = await post_json(
        gw.http, f"/rollouts/{rollout['rollout_id']}/v1/chat/completions", body, rollout["api_key"]
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert [type(e.payload) for e in gw.log.envelopes(rollout["rollout_id"])] == [RolloutStarted]


BAD_COMPLETIONS = [
    ({"prompt": ""}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"prompt": [1, 2, 10**9]}, "prompt"),
    ({"prompt": [-1]}, "prompt"),
    ({"prompt": ["a", "b"]}, "prompt"),
    ({"prompt": "x", "echo": True}, "echo"),
    ({"prompt": "x", "best_of": 3}, "best_of"),
    ({"prompt": "x", "logprobs": 6}, "logprobs"),
]


@pytest.mark.parametrize(("fields", "param"), BAD_COMPLETIONS, ids=lambda v: str(v)[:40])
async def test_bad_completion_fields_are_400_naming_the_field(gw, fields, param):
    rollout = await gw.new_rollout()
    response = await gw.http.post(
        f"/rollouts/{rollout['rollout_id']}/v1/completions",
        json={"model": "m", "max_tokens": 2, **fields},
        headers={"Authorization": f"Bearer {rollout['api_key']}"},
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
    assert len(gw.log.envelopes(rollout["rollout_id"])) == 1


BAD_LIFECYCLE = [
    ("signals", {"step": 0, "name": "s", "value": math.nan}, "value"),
    ("signals", {"step": 0, "name": "s", "value": math.inf}, "value"),
    ("signals", {"step": 0, "name": "s", "value": 1e300}, "value"),
    ("signals", {"step": -1, "name": "s", "value": 1}, "step"),
    ("signals", [{"step": 0, "name": "s", "value": 1}] * 257, None),
    ("finish", {"outcome_reward": math.inf}, "outcome_reward"),
    ("finish", {"outcome_reward": -math.inf}, "outcome_reward"),
    ("finish", {"outcome_reward": math.nan}, "outcome_reward"),
    ("finish", {"status": ""}, "status"),
    ("abort", {}, "reason"),
]


@pytest.mark.parametrize(("action", "body", "param"), BAD_LIFECYCLE, ids=lambda v: str(v)[:30])
async def test_bad_lifecycle_values_are_400_and_leave_no_trace(gw, action, body, param):
    rollout = await gw.new_rollout()
    response = await post_json(gw.http, f"/rollouts/{rollout['rollout_id']}/{action}", body)
    assert response.status_code == 400, response.text
    if param is not None:
        assert response.json()["error"]["param"].endswith(param)
    assert len(gw.log.envelopes(rollout["rollout_id"])) == 1


@pytest.mark.parametrize(
    "body",
    [{"task_id": ""}, {"task_id": "t", "group_size": 0}, {"task_id": "t", "group_size": 10**6},
     {"task_id": "t", "metadata": {"k": 1}}, {"task_id": "x" * 300}],
)  # fmt: skip
async def test_bad_rollout_starts_are_400_and_queue_nothing(gw, body):
    queued = len(gw.log.queue)
    response = await gw.http.post("/rollouts", json=body, headers=ADMIN)
    assert response.status_code == 400, response.text
    assert len(gw.log.queue) == queued


async def test_signals_per_rollout_are_bounded(tiny_policy):
    from tests.unit.gateway.conftest import app_under_test

    async with app_under_test(tiny_policy, max_signals_per_rollout=3) as small:
        rollout = await small.new_rollout()
        path = f"/rollouts/{rollout['rollout_id']}/signals"
        signal = {"step": 0, "name": "s", "value": 1.0}
        assert (await small.http.post(path, json=[signal] * 3, headers=ADMIN)).status_code == 200
        again = await small.http.post(path, json=signal, headers=ADMIN)
        assert again.status_code == 400
        assert len(small.log.envelopes(rollout["rollout_id"])) == 4


async def test_a_bad_request_never_fails_a_good_one_in_the_same_engine_batch(tiny_policy):
    """The engine itself, past validation: an out-of-vocabulary id and an out-of-range seed
    gathered into one micro-batch with a good request fail alone."""
    engine = EmbeddedEngine(tiny_policy, max_batch_size=8, batch_wait_ms=50, max_context=256)
    await engine.start()
    try:
        good = engine.generate([5, 6, 7], SamplingParams(max_tokens=3, seed=1))
        bad_token = engine.generate([5, 10**7], SamplingParams(max_tokens=3))
        bad_seed = engine.generate([5, 6], SamplingParams(max_tokens=3, seed=10**30))
        results = await asyncio.gather(good, bad_token, bad_seed, return_exceptions=True)
    finally:
        await engine.close()
    assert len(results[0][0].token_ids) == 3
    assert isinstance(results[1], EngineError) and isinstance(results[2], EngineError)
    assert "10000000" not in str(results[1])  # no internals in what the agent sees


async def test_a_body_over_the_limit_is_413_whether_declared_or_streamed(tiny_policy):
    """Declared by Content-Length, or only found while reading a chunked body: a 413 in
    OpenAI's error shape either way, and nothing in the log."""
    from tests.unit.gateway.conftest import app_under_test

    async def chunked(pieces: int):
        for _ in range(pieces):
            yield b" " * 512

    async with app_under_test(tiny_policy, max_body_bytes=1024) as small:
        rollout = await small.new_rollout()
        path = f"/rollouts/{rollout['rollout_id']}/v1/chat/completions"
        key = {"Authorization": f"Bearer {rollout['api_key']}"}
        declared = await small.http.post(path, content=b" " * 2048, headers=key)
        streamed = await small.http.post(path, content=chunked(4), headers=key)
        for response in (declared, streamed):
            assert response.status_code == 413, response.text
            error = response.json()["error"]
            assert error["message"] == "request body exceeds 1024 bytes"
            assert (error["type"], error["param"], error["code"]) == (
                "invalid_request_error",
                None,
                None,
            )
        assert len(small.log.envelopes(rollout["rollout_id"])) == 1


async def test_max_tokens_beyond_the_context_is_lowered_to_fit_and_says_so(tiny_policy):
    """clamp_max_tokens (on by default): served with the room the prompt leaves, the asked
    value recorded and counted; off, the same request is a 400 naming max_tokens."""
    async with app_under_test(tiny_policy, max_context_tokens=64) as gw:
        rollout = await gw.new_rollout()
        reply = await gw.sdk(rollout).chat.completions.create(
            model="m", messages=CHAT, max_tokens=32000, seed=1
        )
        [request] = [e.payload for e in gw.log.envelopes(rollout["rollout_id"])
                     if isinstance(e.payload, ModelRequest)]  # fmt: skip
        assert request.max_tokens_asked == 32000
        assert request.max_tokens == 64 - request.prompt_len
        assert reply.usage.prompt_tokens + reply.usage.completion_tokens <= 64
        metrics = (await gw.http.get("/metrics")).text
        assert "forge_gateway_max_tokens_clamped_total 1.0" in metrics
        within = await gw.sdk(rollout).chat.completions.create(
            model="m", messages=CHAT, max_tokens=2, seed=1
        )
        assert within.usage.completion_tokens <= 2
        requests = [e.payload for e in gw.log.envelopes(rollout["rollout_id"])
                    if isinstance(e.payload, ModelRequest)]  # fmt: skip
        assert requests[-1].max_tokens_asked is None and requests[-1].max_tokens == 2
    async with app_under_test(tiny_policy, max_context_tokens=64, clamp_max_tokens=False) as gw:
        rollout = await gw.new_rollout()
        response = await post_json(
            gw.http, f"/rollouts/{rollout['rollout_id']}/v1/chat/completions",
            {"model": "m", "messages": CHAT, "max_tokens": 32000}, rollout["api_key"],
        )  # fmt: skip
        assert response.status_code == 400
        assert response.json()["error"]["param"] == "max_tokens"
