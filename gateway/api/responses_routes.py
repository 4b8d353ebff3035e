"""The OpenAI Responses API, stateless: ``POST /v1/responses``, mounted like the other model
routes at the root and under ``/rollouts/{rollout_id}`` (Codex's ``base_url``)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from gateway.api.answering import answer_chat, json_answer, stream_answer
from gateway.api.deps import RolloutRequestDep
from gateway.api.dialects.responses_answer import Answered, response_events, response_object, sse
from gateway.api.dialects.responses_request import ResponsesRequest, responses_chat_call

router = APIRouter(prefix="/v1")


@router.post("/responses")
async def responses(body: ResponsesRequest, on: RolloutRequestDep) -> Response:
    call, answered = await answer_chat(responses_chat_call(body), on)
    answer = Answered(
        answered.call_id, on.gateway.settings.served_model_name, answered.completions[0],
        answered.generations[0], int(call.prompt.shape[0]),
    )  # fmt: skip
    response = response_object(answer, body)
    if body.stream:
        return stream_answer(sse(response_events(response)), answered.call_id)
    return json_answer(response, answered.call_id)
