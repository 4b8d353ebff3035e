"""A model call from any dialect: prepared, generated and recorded in one of the bounded
slots (429 beyond them), and answered with its call id in ``x-forge-call-id`` (I/O)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any

from fastapi.responses import JSONResponse, StreamingResponse

from gateway.api.access_log import CALL_ID_HEADER
from gateway.api.deps import RolloutRequest
from gateway.call.call_input import ChatCall, prepare_chat_call
from gateway.call.recorder import CallInput
from gateway.call.service import AnsweredCall


async def answer_chat(chat: ChatCall, on: RolloutRequest) -> tuple[CallInput, AnsweredCall]:
    gateway = on.gateway
    async with gateway.service.limiter.slot():
        call = await prepare_chat_call(chat, gateway.renderer, gateway.settings, on.rollout.recent)
        return call, await gateway.service.call(on.rollout, call)


def json_answer(body: dict[str, Any], call_id: str) -> JSONResponse:
    return JSONResponse(body, headers={CALL_ID_HEADER: call_id})


def stream_answer(chunks: Iterable[bytes], call_id: str) -> StreamingResponse:
    """Server-sent events of an answer already recorded: the whole answer is durable before
    its first byte leaves."""

    async def stream() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    return StreamingResponse(
        stream(), media_type="text/event-stream", headers={CALL_ID_HEADER: call_id}
    )
