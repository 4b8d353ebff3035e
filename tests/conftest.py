"""Session fixtures: the real Kafka broker (started through `infra up`'s code) and chDB."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.config import InfraSettings
from infra.kafka_clients import ensure_topics
from infra.lifecycle import infra_up, local_broker
from schemas.topics import TopicSpec

ROOT = Path(__file__).parents[1]

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def infra_settings(tmp_path_factory: pytest.TempPathFactory) -> InfraSettings:
    """Free ports and a temp FORGE_HOME, or the cluster FORGE_KAFKA_BOOTSTRAP names."""
    home = tmp_path_factory.mktemp("forge-home")
    return InfraSettings(home=home, kafka_port=0, kafka_controller_port=0)


@pytest.fixture(scope="session")
def kafka(infra_settings: InfraSettings) -> Iterator[str]:
    """Bootstrap servers of a real broker for the whole session."""
    report = infra_up(infra_settings, with_analytics=False)
    yield report.bootstrap
    if report.local:
        local_broker(infra_settings).down(purge=True)


@pytest.fixture(scope="session")
def analytics(infra_settings: InfraSettings):
    """One client per session: chDB admits one engine path per process."""
    from infra.analytics import analytics_client, ensure_tables

    client = analytics_client(infra_settings)
    ensure_tables(client)
    yield client
    client.close()


@pytest.fixture
def fresh_topic(kafka: str):
    """A factory for a new topic configured like a given spec, private to one test."""

    def make(spec: TopicSpec) -> TopicSpec:
        private = dataclasses.replace(spec, name=f"test.{spec.name}.{uuid.uuid4().hex[:8]}")
        ensure_topics(kafka, (private,), timeout_s=30)
        return private

    return make


@pytest.fixture(scope="session")
def agents_env() -> Path:
    """The pinned clients' environment; its absence fails with the command that builds it."""
    built = subprocess.run([str(ROOT / "scripts/setup_agents.sh")], capture_output=True,
                           text=True, cwd=ROOT)  # fmt: skip
    if built.returncode != 0:
        pytest.fail(f"the clients' environment is missing; build it with scripts/setup_agents.sh"
                    f"\n{built.stderr[-3000:]}")  # fmt: skip
    return Path(built.stdout.strip().splitlines()[-1])
