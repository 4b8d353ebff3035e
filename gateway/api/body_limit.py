"""ASGI middleware refusing request bodies over a size limit with 413, before parsing.

A declared Content-Length over the limit is refused before the app runs. A body that grows
past it while being read (chunked) stops being read; whatever the app answers to the body it
could not read is dropped, and the 413 goes out instead. Both are rendered by
``errors.error_response``, as every refusal is.
"""

from __future__ import annotations

import contextlib

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import BodyTooLargeError, error_response, speaks_anthropic


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        seen = 0
        refused = answered = False

        async def limited_receive() -> Message:
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    refused = True
                    raise self._too_large()
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal answered
            if refused:  # the app's answer to a body it could not read: the 413 replaces it
                return
            answered = True
            await send(message)

        with contextlib.suppress(BodyTooLargeError):
            await self.app(scope, limited_receive, guarded_send)
        if refused and not answered:
            await self._refuse(scope, receive, send)

    def _too_large(self) -> BodyTooLargeError:
        return BodyTooLargeError(f"request body exceeds {self.max_bytes} bytes")

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        anthropic = speaks_anthropic(scope.get("path", ""))
        await error_response(self._too_large(), anthropic=anthropic)(scope, receive, send)
