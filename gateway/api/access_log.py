"""One access-log line per request, in the gateway's log: method, path (with the rollout id),
status, latency and the call id — never a key, a query string or a body (I/O: logging).

The call id comes from the ``x-forge-call-id`` header the model routes answer with, so the
line names the call whose events the log holds. On by default (``access_log``): an operator
sees every refused call, 404s included, where before only the agent did.
"""

from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger("gateway.access")

CALL_ID_HEADER = "x-forge-call-id"


def access_line(method: str, path: str, status: int, seconds: float, call_id: str | None) -> str:
    line = f"{method} {path} {status} {seconds * 1000:.1f}ms"
    return f"{line} call={call_id}" if call_id else line


class AccessLogMiddleware:
    """Pure ASGI, outermost: the status and latency the client sees, body limit included."""

    def __init__(self, app: Any) -> None:
        self.app = app
        log.setLevel(logging.INFO)  # the process's root logger may log warnings only

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status, call_id = 500, None

        async def logged_send(message: dict[str, Any]) -> None:
            nonlocal status, call_id
            if message["type"] == "http.response.start":
                status = message["status"]
                for name, value in message.get("headers", ()):
                    if name == CALL_ID_HEADER.encode():
                        call_id = value.decode("latin-1")
            await send(message)

        try:
            await self.app(scope, receive, logged_send)
        finally:
            elapsed = time.perf_counter() - started
            log.info(access_line(scope["method"], scope["path"], status, elapsed, call_id))
