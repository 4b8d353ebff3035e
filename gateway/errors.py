"""Gateway errors, each with its HTTP status and OpenAI error type, and the one rendering of
any of them as the answer an agent gets (pure).

Third-party errors (request validation, Starlette's own 404/405) are translated into these
at the adapter that catches them; whatever the gateway refuses is then answered by
``error_response``, so every refusal has OpenAI's shape and its Retry-After when one is due.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from starlette.responses import JSONResponse

from schemas.errors import ForgeError

INTERNAL_ERROR = "internal error; nothing of this request was recorded"
"""What an agent is told of an unexpected error: the details go to the log only."""


class GatewayError(ForgeError):
    status = 500
    error_type = "server_error"
    retry_after_s: int | None = None
    """Sent as Retry-After when set."""

    def __init__(
        self, message: str, *, param: str | None = None, retry_after_s: int | None = None
    ) -> None:
        super().__init__(message)
        self.param = param
        if retry_after_s is not None:
            self.retry_after_s = retry_after_s


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


class HttpStatusError(GatewayError):
    """A refusal of the HTTP layer itself (no such path: 404, wrong method: 405), its status
    as the framework chose it."""

    error_type = "invalid_request_error"

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


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


class UnsupportedFieldError(ValueError):
    """A known OpenAI field the gateway cannot honour; names the field for the 400. A
    ValueError, because pydantic turns only those raised in a validator into a validation
    error (``invalid_request`` finds it there)."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field} is not supported: {why}")
        self.field = field


_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "none", "json-or-python"}


def _field_path(loc: tuple[Any, ...]) -> str | None:
    """``("body", "stop", "constrained-str")`` -> ``"stop"``: union-member tags (type names,
    model names) dropped; the API's own fields are snake_case."""
    parts = [
        str(p)
        for p in loc[1:]
        if isinstance(p, int) or not ("[" in p or "-" in p or p in _TYPE_TAGS or p[:1].isupper())
    ]
    return ".".join(parts) or None


def invalid_request(errors: Sequence[Mapping[str, Any]]) -> InvalidRequestError:
    """A request body's validation errors (pydantic's) as one 400 naming the field, as OpenAI
    answers a malformed request."""
    if any(e.get("type") == "json_invalid" for e in errors):
        return InvalidRequestError("body is not valid JSON")
    first = errors[0] if errors else {}
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, UnsupportedFieldError):
        return InvalidRequestError(str(cause), param=cause.field)
    param = _field_path(tuple(first.get("loc", ())))
    message = "; ".join(f"{_field_path(tuple(e['loc'])) or 'body'}: {e['msg']}" for e in errors[:5])
    return InvalidRequestError(message, param=param)


def speaks_anthropic(path: str) -> bool:
    """Whether ``path`` is an Anthropic Messages route, whose clients read Anthropic's errors."""
    return path.endswith(("/v1/messages", "/v1/messages/count_tokens"))


ANTHROPIC_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
    404: "not_found_error", 409: "invalid_request_error", 413: "request_too_large",
    429: "rate_limit_error", 503: "overloaded_error",
}  # fmt: skip
"""Anthropic's error type per status (anything else: ``api_error``)."""


def error_response(exc: GatewayError, *, anthropic: bool = False) -> JSONResponse:
    """The answer to a refused request: OpenAI's error shape with the error's status (or
    Anthropic's, on its routes), and Retry-After when the error says when to retry. Anthropic's
    shape names the field in the message, having no ``param``."""
    if anthropic:
        message = (
            f"{exc.param}: {exc}" if exc.param and not str(exc).startswith(exc.param) else str(exc)
        )
        kind = ANTHROPIC_TYPES.get(exc.status, "api_error")
        body: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
    else:
        error = {"message": str(exc), "type": exc.error_type, "param": exc.param, "code": None}
        body = {"error": error}
    response = JSONResponse(body, exc.status)
    if exc.retry_after_s is not None:
        response.headers["Retry-After"] = str(exc.retry_after_s)
    return response
