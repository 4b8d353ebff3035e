"""The vLLM backend against a stand-in that follows vLLM's real response format: what a live
server (tests/integration/test_vllm_live.py) cannot show — the exact request sent, malformed
answers, the policy-directory check, and a server run by others coming back."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import numpy as np
import pytest
import uvicorn

from gateway.engines.engine import SamplingParams
from gateway.engines.vllm_engine import VllmEngine, parse_completion, policy_dir_problem
from gateway.errors import EngineError, EngineUnavailableError
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
    engine = VllmEngine(url, tokenizer=None, model_name="policy")
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


def policy_dir(path, *, truncate: bool = False):
    """A directory shaped like an exported policy: config.json and one safetensors file."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    data = b"\0" * (4 if truncate else 8)
    (path / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + data)
    return path


async def test_a_reload_passes_the_policy_directory_and_tags_generations(fake_vllm, tmp_path):
    app, url = fake_vllm
    v1 = policy_dir(tmp_path / "v000001")
    engine = VllmEngine(url, tokenizer=None, model_name="policy")
    try:
        before = await engine.generate([10], SamplingParams(max_tokens=2))
        reload = asyncio.create_task(engine.load_policy(1, v1.as_uri()))
        await asyncio.sleep(0)  # the reload has begun
        after = await engine.generate([10], SamplingParams(max_tokens=2))
        await reload
    finally:
        await engine.close()
    assert app.state.rpc[-2:] == [
        {"method": "reload_weights", "kwargs": {"weights_path": str(v1)}},
        {"reset_prefix_cache": True},  # KV blocks of the old weights must not be reused
    ]
    assert before[0].policy_version == 0
    assert after[0].policy_version == 1, "a generation after a reload began carries the new version"
    assert int(after[0].token_ids[0]) - int(before[0].token_ids[0]) == 100


def test_a_directory_vllm_could_not_load_is_named(tmp_path):
    assert policy_dir_problem(policy_dir(tmp_path / "ok")) is None
    assert policy_dir_problem(tmp_path / "missing") == "no such directory"
    assert "truncated" in policy_dir_problem(policy_dir(tmp_path / "cut", truncate=True))
    (tmp_path / "ok" / "config.json").unlink()
    assert "config.json" in policy_dir_problem(tmp_path / "ok")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text("{}")
    assert policy_dir_problem(tmp_path / "empty") == "no safetensors weights"
    (tmp_path / "empty" / "model.safetensors").write_bytes(b"\xff" * 64)
    assert "header" in policy_dir_problem(tmp_path / "empty")


async def test_a_reload_vllm_could_not_carry_out_is_never_asked(fake_vllm, tmp_path):
    app, url = fake_vllm
    asked = len(app.state.rpc)
    engine = VllmEngine(url, tokenizer=None, model_name="policy")
    try:
        with pytest.raises(EngineError, match="no such directory"):
            await engine.load_policy(7, (tmp_path / "gone").as_uri())
        with pytest.raises(EngineError, match="truncated"):
            await engine.load_policy(7, policy_dir(tmp_path / "cut", truncate=True).as_uri())
    finally:
        await engine.close()
    assert len(app.state.rpc) == asked and engine.policy_version == 0 and engine.available


async def test_a_dead_server_puts_the_engine_down_until_it_is_back(fake_vllm, tmp_path):
    """A server run by others: waited for, then the policy loaded again before calls."""
    app, url = fake_vllm
    v1 = policy_dir(tmp_path / "v000001")
    engine = VllmEngine(url, tokenizer=None, model_name="policy", probe_timeout_s=2)
    try:
        await engine.load_policy(1, v1.as_uri())
        app.state.healthy = False  # vLLM's engine died: every call answers 500
        with pytest.raises(EngineUnavailableError):
            await engine.generate([10], SamplingParams(max_tokens=2))
        assert not engine.available
        with pytest.raises(EngineUnavailableError):
            await engine.generate([10], SamplingParams(max_tokens=2))
        reloads = len(app.state.rpc)
        app.state.healthy = True  # restarted by whoever runs it, on its base weights
        for _ in range(100):
            if engine.available:
                break
            await asyncio.sleep(0.05)
        assert engine.available, "the engine never came back"
        assert app.state.rpc[reloads:] == [
            {"method": "reload_weights", "kwargs": {"weights_path": str(v1)}},
            {"reset_prefix_cache": True},
        ]
        out = await engine.generate([10], SamplingParams(max_tokens=2))
    finally:
        app.state.healthy = True
        await engine.close()
    assert out[0].policy_version == 1 and engine.restarts == 0


async def test_a_failed_reload_that_left_vllm_alive_loads_the_last_policy_again(
    fake_vllm, tmp_path
):
    """vLLM 0.32 dies on a failed reload; one that survives may hold half-loaded weights."""
    app, url = fake_vllm
    base, v1 = policy_dir(tmp_path / "base"), policy_dir(tmp_path / "v000001")
    engine = VllmEngine(url, tokenizer=None, model_name="policy", base_dir=base)
    try:
        app.state.fail_reload = True
        with pytest.raises(EngineError):
            await engine.load_policy(1, v1.as_uri())
        assert not engine.available
        app.state.fail_reload = False
        for _ in range(100):
            if engine.available:
                break
            await asyncio.sleep(0.05)
        out = await engine.generate([10], SamplingParams(max_tokens=2))
    finally:
        app.state.fail_reload = False
        await engine.close()
    assert app.state.rpc[-2:] == [
        {"method": "reload_weights", "kwargs": {"weights_path": str(base)}},
        {"reset_prefix_cache": True},
    ]
    assert out[0].policy_version == 0 and engine.restarts == 0


def test_a_response_without_token_ids_is_an_engine_error():
    body = {"choices": [{"index": 0, "text": "x", "logprobs": None, "finish_reason": "stop"}]}
    with pytest.raises(EngineError, match="token_ids"):
        parse_completion(body, 0)
