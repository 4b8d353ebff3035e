"""The Anthropic Messages API: ``POST /v1/messages`` and ``/v1/messages/count_tokens``,
mounted like the OpenAI routes at the root (rollout named by ``x-api-key`` or bearer key) and
under ``/rollouts/{rollout_id}``, the ``ANTHROPIC_BASE_URL`` a rollout is handed (Claude Code
adds ``?beta=true``, which changes nothing here). Every refusal on these paths has Anthropic's
error shape (``gateway.errors.error_response``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from gateway.api.answering import answer_chat, json_answer, stream_answer
from gateway.api.deps import RolloutRequestDep
from gateway.api.dialects.messages_answer import message_body, message_events, sse
from gateway.api.dialects.messages_request import MessagesRequest, messages_chat_call
from gateway.call.call_input import chat_prompt_ids
from gateway.errors import InvalidRequestError

router = APIRouter(prefix="/v1")


@router.post("/messages")
async def messages(body: MessagesRequest, on: RolloutRequestDep) -> Response:
    if body.max_tokens < 1:
        raise InvalidRequestError("max_tokens: a number of tokens of at least 1 is required",
                                  param="max_tokens")  # fmt: skip
    call, answered = await answer_chat(messages_chat_call(body), on)
    answer = message_body(
        answered.call_id, on.gateway.settings.served_model_name, answered.completions[0],
        answered.generations[0], int(call.prompt.shape[0]),
    )  # fmt: skip
    if body.stream:
        return stream_answer(sse(message_events(answer)), answered.call_id)
    return json_answer(answer, answered.call_id)


@router.post("/messages/count_tokens")
async def count_tokens(body: MessagesRequest, on: RolloutRequestDep) -> dict[str, Any]:
    """The prompt tokens the same request would render to (bridged onto the rollout's last
    turn where it would be): nothing is generated or recorded."""
    gateway = on.gateway
    ids = await chat_prompt_ids(messages_chat_call(body), gateway.renderer, on.rollout.recent)
    return {"input_tokens": len(ids)}
