"""The OpenAI-compatible endpoints: one router, mounted at the root (rollout named by key or
header) and under ``/rollouts/{rollout_id}`` (rollout named by the base URL)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response, StreamingResponse

from gateway import responses
from gateway.auth import Auth
from gateway.chat_tokenizer import ChatTokenizer
from gateway.config import GatewaySettings
from gateway.engine import SamplingParams
from gateway.errors import InvalidRequestError
from gateway.protocol import ChatCompletionRequest, CompletionRequest, _Request
from gateway.recorder import CallInput, normalise_message
from gateway.rollouts import Rollout
from gateway.service import RolloutService
from gateway.tool_calls import new_tool_results, offered_tools
from schemas.records import ToolResult

ROLLOUT_PREFIX = "/rollouts/{rollout_id}"


def _sse(chunks: list[dict[str, Any]]) -> StreamingResponse:
    async def stream() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield f"data: {json.dumps(chunk)}\n\n".encode()
        yield b"data: [DONE]\n\n"

    return StreamingResponse(stream(), media_type="text/event-stream")


async def _prompt_ids(body: CompletionRequest, tokenizer: ChatTokenizer) -> list[int]:
    if isinstance(body.prompt, str):
        return await tokenizer.encode_off_loop(body.prompt, param="prompt")
    vocab = len(tokenizer)
    ids = [int(t) for t in body.prompt]
    if any(not 0 <= t < vocab for t in ids):
        raise InvalidRequestError(f"token ids must be in [0, {vocab})", param="prompt")
    return ids


def openai_router(settings: GatewaySettings, service: RolloutService, auth: Auth) -> APIRouter:
    router = APIRouter(prefix="/v1")
    name = settings.served_model_name
    tokenizer = service.engine.tokenizer
    open_rollout = Depends(auth.open_rollout)

    def call_input(
        endpoint: str,
        body: _Request,
        prompt_ids: list[int],
        max_tokens: int | None,
        top_k: int | None,
        conversation: tuple[Any, ...] | None,
        offered: frozenset[str] | None = None,
        results: tuple[ToolResult, ...] = (),
    ) -> CallInput:
        limit = max_tokens or settings.default_max_tokens
        service.check_prompt(len(prompt_ids), limit)
        params = SamplingParams(
            max_tokens=limit,
            temperature=1.0 if body.temperature is None else body.temperature,
            top_p=1.0 if body.top_p is None else body.top_p,
            n=body.n,
            seed=body.seed,
            stop=body.stop_list(),
            top_logprobs=top_k or 0,
        )
        prompt = np.asarray(prompt_ids, dtype=np.int32)
        return CallInput(endpoint, body.model, prompt, params, body.temperature, body.top_p,
                         conversation, offered, results)  # fmt: skip

    def token_text(token: int) -> str:
        return tokenizer.decode([token])

    @router.post("/chat/completions")
    async def chat(body: ChatCompletionRequest, rollout: Rollout = open_rollout) -> Response:
        async with service.limiter.slot():
            messages = [m.model_dump(exclude_none=True) for m in body.messages]
            prompt_ids = await tokenizer.encode_chat_off_loop(
                messages, body.tools, body.chat_template_kwargs
            )
            conversation = tuple(normalise_message(m) for m in messages)
            offered = offered_tools(body.tools) if body.tools_enabled else None
            results = tuple(new_tool_results(messages))
            call = call_input("chat.completions", body, prompt_ids, body.token_limit(), body.top_k,
                              conversation, offered, results)  # fmt: skip
            recorded = await service.call(rollout, call)
        generations = recorded.generations
        answers = [
            (*responses.assistant_message(parsed, g.finish_reason),
             responses.chat_logprobs(g, body.top_k, token_text))
            for g, parsed in zip(generations, recorded.completions, strict=True)
        ]  # fmt: skip
        call_id = recorded.call_id
        usage = responses.usage(len(prompt_ids), generations)
        if body.stream:
            stream_usage = usage if body.include_usage else None
            return _sse(responses.chat_chunks(call_id, name, answers, stream_usage))
        return JSONResponse(responses.chat_completion(call_id, name, answers, usage))

    @router.post("/completions")
    async def completions(body: CompletionRequest, rollout: Rollout = open_rollout) -> Response:
        async with service.limiter.slot():
            prompt_ids = await _prompt_ids(body, tokenizer)
            call = call_input("completions", body, prompt_ids, body.max_tokens, body.top_k, None)
            recorded = await service.call(rollout, call)
        call_id, generations = recorded.call_id, recorded.generations
        choices = [(g, responses.text_logprobs(g, body.top_k, token_text)) for g in generations]
        usage = responses.usage(len(prompt_ids), generations)
        if body.stream:
            stream_usage = usage if body.include_usage else None
            return _sse(responses.text_chunks(call_id, name, choices, stream_usage))
        return JSONResponse(responses.text_completion(call_id, name, choices, usage))

    @router.get("/models", dependencies=[Depends(auth.any_key)])
    async def models() -> dict[str, Any]:
        model = {"id": name, "object": "model", "created": 0, "owned_by": "forge-rl"}
        return {"object": "list", "data": [model]}

    return router
