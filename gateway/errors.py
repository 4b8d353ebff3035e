"""Gateway errors, each with its HTTP status and OpenAI error type; mapped in one place."""

from __future__ import annotations

import asyncio
from typing import Any

from schemas.errors import ForgeError


class GatewayError(ForgeError):
    status = 500
    error_type = "server_error"
    retry_after_s: int | None = None
    """Sent as Retry-After when set."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class InvalidRequestError(GatewayError):
    status = 400
    error_type = "invalid_request_error"


class AuthenticationError(GatewayError):
    status = 401
    error_type = "authentication_error"


class PermissionDeniedError(GatewayError):
    status = 403
    error_type = "permission_error"


class RolloutNotFoundError(GatewayError):
    status = 404
    error_type = "not_found_error"


class RolloutClosedError(GatewayError):
    status = 409
    error_type = "conflict_error"


class BodyTooLargeError(GatewayError):
    status = 413
    error_type = "invalid_request_error"


class OverloadedError(GatewayError):
    """More generations in flight and queued than the gateway admits: retry later."""

    status = 429
    error_type = "rate_limit_error"
    retry_after_s = 1


class EventLogUnavailableError(GatewayError):
    """The events could not be stored; nothing was acknowledged to the agent."""

    status = 503
    error_type = "service_unavailable"
    retry_after_s = 1

    def __init__(self, message: str, *, pending: asyncio.Future[Any] | None = None) -> None:
        super().__init__(message)
        self.pending = pending
        """A send that timed out but may still be delivered (the producer retries)."""


class EngineError(GatewayError):
    """The engine failed; the message is for the agent, details go to the log."""

    status = 502
    error_type = "engine_error"


class EngineUnavailableError(GatewayError):
    """The engine is down (found dead, being restarted): nothing was recorded; retry later."""

    status = 503
    error_type = "service_unavailable"
    retry_after_s = 5
