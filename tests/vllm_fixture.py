"""A stand-in for vLLM's OpenAI server that follows its real wire format (GPU-less tests).

/v1/completions with token-id prompts, ``return_token_ids`` and ``logprobs`` answers the way
vLLM >= 0.10.2 does: per choice ``prompt_token_ids`` and ``token_ids``, and ``logprobs`` with
``tokens`` as "token_id:N" strings (``return_tokens_as_token_ids``), ``token_logprobs``,
``top_logprobs`` and ``text_offset``. /collective_rpc is vLLM's dev-mode RPC endpoint.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import FastAPI, HTTPException, Request


def create_fake_vllm() -> FastAPI:
    app = FastAPI()
    app.state.requests = []
    app.state.rpc = []
    app.state.weights_generation = 0

    @app.post("/v1/completions")
    async def completions(request: Request) -> dict[str, Any]:
        body = await request.json()
        app.state.requests.append(body)
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

    @app.post("/collective_rpc")
    async def collective_rpc(request: Request) -> dict[str, Any]:
        body = await request.json()
        app.state.rpc.append(body)
        if body.get("method") == "reload_weights":
            app.state.weights_generation += 1
        return {"results": [None]}

    return app
