"""Weight sync into the embedded engine, and no answer without stored events."""

from __future__ import annotations

import os
import signal
import time
from datetime import UTC, datetime

import httpx
import numpy as np
import openai
import pytest
import torch

from infra.kafka_clients import sync_producer
from infra.local_broker import LocalBroker
from infra.tiny_model import save_tiny_policy
from schemas import codec
from schemas.records import EventsVoided, ModelRequest, ModelResponse, PolicyUpdated
from streams.stage.assembler import RolloutAssembly
from tests.gateway_harness import running_gateway
from tests.reference_logprobs import naive_logprobs
from trainer.sequences import CallSequence

pytestmark = pytest.mark.integration

CHAT = [{"role": "user", "content": "Add 2 and 2."}]


def perturbed_policy(base, target):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.save_pretrained(target)
    return AutoModelForCausalLM.from_pretrained(target).float().eval()


def test_engine_serves_each_published_policy_and_its_logprobs_are_exact(kafka, tmp_path):
    base = save_tiny_policy(tmp_path / "base")
    new_model = perturbed_policy(base, tmp_path / "v000001")
    with running_gateway(kafka, base) as gw:
        producer = sync_producer(kafka)
        update = PolicyUpdated(1, 1, (tmp_path / "v000001").as_uri(), datetime.now(UTC))
        producer.send(gw.policy.name, codec.encode(update), key=b"policy").get(timeout=30)
        producer.close()
        deadline = time.monotonic() + 60
        while httpx.get(f"{gw.url}/health").json()["policy_version"] != 1:
            assert time.monotonic() < deadline, "the engine never picked up policy v1"
            time.sleep(0.1)
        rollout = gw.new_rollout()
        agent = openai.OpenAI(base_url=rollout["base_url"], api_key=rollout["api_key"])
        agent.chat.completions.create(model="m", messages=CHAT, max_tokens=10, seed=4)
        events = [e.payload for e in gw.events_of(rollout["rollout_id"])]
    request = next(p for p in events if isinstance(p, ModelRequest))
    response = next(p for p in events if isinstance(p, ModelResponse))
    assert response.policy_version == 1
    tokens = np.concatenate([request.prompt_token_ids, response.completion_token_ids])
    call = CallSequence("s", "c", tokens, request.prompt_len, response.logprobs, 0.0, 1)
    with torch.no_grad():
        (expected,) = naive_logprobs(new_model, [call])
    np.testing.assert_allclose(response.logprobs, expected.numpy(), atol=1e-4)


@pytest.mark.slow
def test_kafka_down_means_503_and_no_answer(tmp_path):
    broker = LocalBroker(
        tmp_path / "kafka", version="4.4.0", cache_dir=_cache_dir(), port=0, controller_port=0
    )
    state = broker.up()
    try:
        base = save_tiny_policy(tmp_path / "base")
        with running_gateway(state.bootstrap, base, produce_timeout_s=3.0) as gw:
            rollout = gw.new_rollout()
            agent = openai.OpenAI(
                base_url=rollout["base_url"], api_key=rollout["api_key"], max_retries=0
            )
            agent.chat.completions.create(model="m", messages=CHAT, max_tokens=2)
            broker.down()
            started = time.monotonic()
            with pytest.raises(openai.APIStatusError) as failure:
                agent.chat.completions.create(model="m", messages=CHAT, max_tokens=2)
            assert failure.value.status_code == 503
            assert failure.value.body["type"] == "service_unavailable"
            assert time.monotonic() - started < 30
    finally:
        broker.down(purge=True)


def _cache_dir():
    from infra.config import InfraSettings

    return InfraSettings().cache_dir


@pytest.mark.slow
def test_a_call_answered_503_while_the_broker_is_paused_is_in_no_trajectory(tmp_path):
    """SIGSTOP the broker during a call: the agent gets 503; after SIGCONT the producer's
    retries may still land the call's events, but the void written before the rollout's next
    event keeps them out of its trajectory."""
    broker = LocalBroker(
        tmp_path / "kafka", version="4.4.0", cache_dir=_cache_dir(), port=0, controller_port=0
    )
    state = broker.up()
    try:
        base = save_tiny_policy(tmp_path / "base")
        with running_gateway(state.bootstrap, base, produce_timeout_s=2.0) as gw:
            rollout = gw.new_rollout()
            rid = rollout["rollout_id"]
            agent = openai.OpenAI(
                base_url=rollout["base_url"], api_key=rollout["api_key"], max_retries=0
            )
            kept = agent.chat.completions.create(model="m", messages=CHAT, max_tokens=2)
            os.kill(state.pid, signal.SIGSTOP)
            try:
                with pytest.raises(openai.APIStatusError) as failure:
                    agent.chat.completions.create(model="m", messages=CHAT, max_tokens=2)
            finally:
                os.kill(state.pid, signal.SIGCONT)
            assert failure.value.status_code == 503
            assert "retry" in failure.value.body["message"]
            deadline = time.monotonic() + 60
            while True:  # the log is back once a lifecycle write is acknowledged
                with gw.admin() as client:
                    finished = client.post(f"/rollouts/{rid}/finish", json={"outcome_reward": 1})
                if finished.status_code == 200:
                    break
                assert finished.status_code == 503 and time.monotonic() < deadline
                time.sleep(0.5)
            envelopes = gw.events_of(rid)
    finally:
        broker.down(purge=True)
    voided = {
        i for e in envelopes if isinstance(e.payload, EventsVoided) for i in e.payload.event_ids
    }
    requests = [e for e in envelopes if isinstance(e.payload, ModelRequest)]
    assert len(voided) >= 2  # the 503'd call's request and response
    assembly = RolloutAssembly(rid)
    for envelope in envelopes:
        assembly.add(envelope)
    calls = assembly.assemble().calls
    assert [c.call_id for c in calls] == [kept.id.removeprefix("chatcmpl-")]
    assert len(requests) == 2  # the paused broker read the 503'd call's produce after SIGCONT
