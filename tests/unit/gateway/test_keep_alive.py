"""The gateway outlives its clients' idle connections: a client that reuses a connection the
server is closing at that instant gets a reset (httpx.ReadError) mid-request, which a fleet
cannot safely retry for a POST. Seen as a crashed main-job run when both sides used 5 s."""

from __future__ import annotations

import httpx
from openai._constants import DEFAULT_CONNECTION_LIMITS

from gateway.config import GatewaySettings
from gateway.server import uvicorn_options


def test_the_gateway_keeps_idle_connections_longer_than_httpx_and_the_openai_sdk():
    clients = [httpx.Limits().keepalive_expiry, DEFAULT_CONNECTION_LIMITS.keepalive_expiry]
    longest = max(expiry for expiry in clients if expiry is not None)
    assert (
        uvicorn_options(GatewaySettings(admin_key="an-admin-key-for-tests"))["timeout_keep_alive"]
        > longest
    )
