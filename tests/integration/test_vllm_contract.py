"""The vLLM backend against a fixture that follows vLLM's real response format."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest
import uvicorn

from gateway.engine import SamplingParams
from gateway.errors import EngineError
from gateway.vllm_engine import VllmEngine, parse_completion
from infra.local_broker import free_port
from tests.vllm_fixture import create_fake_vllm


@pytest.fixture(scope="module")
def fake_vllm():
    app = create_fake_vllm()
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    yield app, f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


async def test_generation_captures_token_ids_and_logprobs(fake_vllm):
    app, url = fake_vllm
    engine = VllmEngine(url, tokenizer=None, model_name="policy", policy_link=None)
    try:
        out = await engine.generate(
            [1, 2, 3], SamplingParams(max_tokens=4, n=2, seed=9, stop=("\n",))
        )
    finally:
        await engine.close()
    sent = app.state.requests[-1]
    assert sent["prompt"] == [1, 2, 3]
    assert sent["return_token_ids"] is True and sent["logprobs"] == 0
    assert sent["n"] == 2 and sent["seed"] == 9 and sent["stop"] == ["\n"]
    assert len(out) == 2
    np.testing.assert_array_equal(out[0].token_ids, [3, 4, 5, 6])
    np.testing.assert_allclose(out[0].logprobs, [-0.25, -0.5, -0.75, -1.0])
    assert out[0].finish_reason == "length" and out[0].policy_version == 0


async def test_weight_reload_repoints_the_served_dir_and_tags_generations(fake_vllm, tmp_path):
    app, url = fake_vllm
    link = tmp_path / "current"
    (tmp_path / "v000001").mkdir()
    engine = VllmEngine(url, tokenizer=None, model_name="policy", policy_link=link)
    try:
        before = await engine.generate([10], SamplingParams(max_tokens=2))
        reload = asyncio.create_task(engine.load_policy(1, (tmp_path / "v000001").as_uri()))
        await asyncio.sleep(0)  # the reload has begun
        after = await engine.generate([10], SamplingParams(max_tokens=2))
        await reload
    finally:
        await engine.close()
    assert app.state.rpc[-1] == {"method": "reload_weights"}
    assert link.resolve() == (tmp_path / "v000001").resolve()
    assert before[0].policy_version == 0
    assert after[0].policy_version == 1, "a generation after a reload began carries the new version"
    assert int(after[0].token_ids[0]) - int(before[0].token_ids[0]) == 100


def test_a_response_without_token_ids_is_an_engine_error():
    body = {"choices": [{"index": 0, "text": "x", "logprobs": None, "finish_reason": "stop"}]}
    with pytest.raises(EngineError, match="token_ids"):
        parse_completion(body, 0)
