"""Who may act on what: the admin key acts on every rollout, a rollout's key only on its own.
The admin key is compared in constant time; rollout keys are found by their hash (see
``rollouts``). Routes reach these checks through ``deps``."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable

from fastapi import Request

from gateway.call.rollouts import Rollout, RolloutRegistry
from gateway.errors import AuthenticationError, InvalidRequestError, PermissionDeniedError


class Auth:
    def __init__(
        self,
        admin_key: str,
        rollouts: RolloutRegistry,
        sync: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """``sync``, with several replicas: returns once every event acknowledged before the
        call has been applied here, so a rollout another replica started is known."""
        self._admin_key = admin_key.encode()
        self.rollouts = rollouts
        self.sync = sync

    def _token(self, request: Request) -> str:
        """The bearer key, else Anthropic's ``x-api-key``."""
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
        key = request.headers.get("x-api-key", "").strip()
        if key:
            return key
        raise AuthenticationError("missing API key (Authorization: Bearer, or x-api-key)")

    def _is_admin(self, token: str) -> bool:
        return secrets.compare_digest(token.encode(), self._admin_key)

    async def admin(self, request: Request) -> None:
        """The admin key."""
        if not self._is_admin(self._token(request)):
            raise PermissionDeniedError("this endpoint needs the admin key")

    async def any_key(self, request: Request) -> None:
        """The admin key or any open rollout's key."""
        token = self._token(request)
        if not self._is_admin(token) and self.rollouts.id_for_key(token) is None:
            raise AuthenticationError("invalid API key")

    async def rollout(self, request: Request) -> Rollout:
        """The rollout a request acts on (path, X-Forge-Rollout header, or the key's own
        rollout), which the key may act on."""
        token = self._token(request)
        if self.sync is not None:
            await self.sync()
        is_admin = self._is_admin(token)
        key_rollout = None if is_admin else self.rollouts.id_for_key(token)
        if not is_admin and key_rollout is None:
            raise AuthenticationError("invalid API key")
        rollout_id = (
            request.path_params.get("rollout_id")
            or request.headers.get("x-forge-rollout")
            or key_rollout
        )
        if rollout_id is None:
            raise InvalidRequestError(
                "no rollout: use base URL /rollouts/{id}/v1, header X-Forge-Rollout, "
                "or the rollout's API key"
            )
        if not is_admin and key_rollout != rollout_id:
            raise PermissionDeniedError("this API key belongs to another rollout")
        return self.rollouts.get(rollout_id)

    async def open_rollout(self, request: Request) -> Rollout:
        """As ``rollout``, and still running."""
        return self.rollouts.open((await self.rollout(request)).rollout_id)
