"""Gateway errors, each with its HTTP status and OpenAI error type; mapped in one place."""

from __future__ import annotations

from schemas.errors import ForgeError


class GatewayError(ForgeError):
    status = 500
    error_type = "server_error"

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


class EventLogUnavailableError(GatewayError):
    """The events could not be stored; nothing was acknowledged to the agent."""

    status = 503
    error_type = "service_unavailable"


class EngineError(GatewayError):
    status = 502
    error_type = "engine_error"
