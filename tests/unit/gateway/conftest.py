"""A gateway app over the tiny embedded engine and an in-memory event log, driven through
httpx's ASGI transport (and the openai SDK on top of it): no server, no Kafka."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest

from gateway.app import create_app
from gateway.call.rendering import build_renderer
from gateway.config import GatewaySettings
from gateway.engines.chat_tokenizer import ChatTokenizer
from gateway.engines.embedded_engine import EmbeddedEngine
from infra.tiny_model import save_tiny_policy
from tests.family_tokenizers import save_family_tokenizer
from tests.family_turns import NAMES
from tests.memory_event_log import MemoryEventLog

ADMIN_KEY = "unit-admin-key-0123456789"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


@dataclass
class AppUnderTest:
    app: Any
    log: MemoryEventLog
    engine: EmbeddedEngine
    http: httpx.AsyncClient

    async def new_rollout(self, **body: Any) -> dict[str, Any]:
        response = await self.http.post("/rollouts", json={"task_id": "t", **body}, headers=ADMIN)
        assert response.status_code == 200, response.text
        return response.json()

    def sdk(self, rollout: dict[str, Any]) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=rollout["base_url"], api_key=rollout["api_key"], http_client=self.http,
            max_retries=0,
        )  # fmt: skip


@pytest.fixture(scope="session")
def tiny_policy(tmp_path_factory: pytest.TempPathFactory):
    return save_tiny_policy(tmp_path_factory.mktemp("gateway-unit") / "base")


@contextlib.asynccontextmanager
async def app_under_test(model_dir, **overrides: Any) -> AsyncIterator[AppUnderTest]:
    fields = {"max_context_tokens": 256, "default_max_tokens": 8, **overrides}
    settings = GatewaySettings(
        admin_key=ADMIN_KEY, port=8000, model_dir=model_dir, follow_policy=False, **fields
    )
    engine = EmbeddedEngine(model_dir, max_batch_size=8, batch_wait_ms=20, max_context=256)
    log = MemoryEventLog()
    app = create_app(settings, engine, log)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http,
    ):
        yield AppUnderTest(app, log, engine, http)


@pytest.fixture(scope="module")
async def gw(tiny_policy) -> AsyncIterator[AppUnderTest]:
    async with app_under_test(tiny_policy) as running:
        yield running


@pytest.fixture(scope="package", params=NAMES)
def family(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """(name, tokenizer, renderer, note) of each family, on a local tokenizer carrying its
    special tokens (``tests.family_tokenizers``), its renderer as the gateway builds it."""
    directory = save_family_tokenizer(tmp_path_factory.mktemp(request.param), request.param)
    tokenizer = ChatTokenizer(directory)
    renderer, note = build_renderer(tokenizer, "auto")
    return request.param, tokenizer, renderer, note
