"""The OpenAI-compatible endpoints: one router, mounted at the root (rollout named by key or
header) and under ``/rollouts/{rollout_id}`` (rollout named by the base URL). A request is
validated by ``protocol``, generated and recorded by the rollout service, and answered in
OpenAI's shape by ``responses``."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import Response, StreamingResponse

from gateway.api import responses
from gateway.api.answering import answer_chat, json_answer, stream_answer
from gateway.api.deps import GatewayDep, RolloutRequest, RolloutRequestDep, require_any_key
from gateway.api.protocol import ChatCompletionRequest, CompletionRequest, chat_call, text_call
from gateway.call.recorder import CallInput
from gateway.call.service import AnsweredCall
from gateway.engines.chat_tokenizer import ChatTokenizer

ROLLOUT_PREFIX = "/rollouts/{rollout_id}"

router = APIRouter(prefix="/v1")


def _sse(chunks: list[dict[str, Any]], call_id: str) -> StreamingResponse:
    lines = [f"data: {json.dumps(chunk)}\n\n".encode() for chunk in chunks]
    return stream_answer([*lines, b"data: [DONE]\n\n"], call_id)


def _token_text(tokenizer: ChatTokenizer) -> responses.TokenText:
    return lambda token: tokenizer.decode([token])


async def _answered(
    body: ChatCompletionRequest | CompletionRequest, on: RolloutRequest
) -> tuple[CallInput, AnsweredCall]:
    if isinstance(body, ChatCompletionRequest):
        return await answer_chat(chat_call(body), on)
    gateway = on.gateway
    async with gateway.service.limiter.slot():
        call = await text_call(body, gateway.tokenizer, gateway.settings)
        return call, await gateway.service.call(on.rollout, call)


@router.post("/chat/completions")
async def chat(body: ChatCompletionRequest, on: RolloutRequestDep) -> Response:
    call, recorded = await _answered(body, on)
    settings, tokenizer = on.gateway.settings, on.gateway.tokenizer
    generations, token_text = recorded.generations, _token_text(tokenizer)
    answers = [
        (*responses.assistant_message(parsed, g.finish_reason),
         responses.chat_logprobs(g, body.top_k, token_text))
        for g, parsed in zip(generations, recorded.completions, strict=True)
    ]  # fmt: skip
    call_id, name = recorded.call_id, settings.served_model_name
    usage = responses.usage(int(call.prompt.shape[0]), generations)
    if body.stream:
        stream_usage = usage if body.include_usage else None
        return _sse(responses.chat_chunks(call_id, name, answers, stream_usage), call_id)
    return json_answer(responses.chat_completion(call_id, name, answers, usage), call_id)


@router.post("/completions")
async def completions(body: CompletionRequest, on: RolloutRequestDep) -> Response:
    call, recorded = await _answered(body, on)
    settings, tokenizer = on.gateway.settings, on.gateway.tokenizer
    call_id, generations = recorded.call_id, recorded.generations
    token_text = _token_text(tokenizer)
    choices = [(g, responses.text_logprobs(g, body.top_k, token_text)) for g in generations]
    name = settings.served_model_name
    usage = responses.usage(int(call.prompt.shape[0]), generations)
    if body.stream:
        stream_usage = usage if body.include_usage else None
        return _sse(responses.text_chunks(call_id, name, choices, stream_usage), call_id)
    return json_answer(responses.text_completion(call_id, name, choices, usage), call_id)


@router.get("/models", dependencies=[Depends(require_any_key)])
async def models(gateway: GatewayDep) -> dict[str, Any]:
    settings = gateway.settings
    model = {"id": settings.served_model_name, "object": "model", "created": 0,
             "owned_by": "forge-rl"}  # fmt: skip
    return {"object": "list", "data": [model]}
