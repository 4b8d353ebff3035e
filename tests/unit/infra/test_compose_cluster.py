"""docker-compose.cluster.yml, layered on the main file as Compose layers it: three brokers
that agree on their quorum and replication, and every service of ours naming all three."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from infra.config import InfraSettings
from infra.settings import load_settings
from tests.unit.infra.test_compose import ADMIN_KEY, COMPOSE, ROOT, environment, interpolate, raw

CLUSTER = ROOT / "docker-compose.cluster.yml"


def layered(base: Any, override: Any) -> Any:
    """Compose's merge of an override file: mappings key by key, anything else replaced."""
    if isinstance(base, Mapping) and isinstance(override, Mapping):
        keys = [*base, *(k for k in override if k not in base)]
        return {k: layered(base[k], override[k]) if k in base and k in override
                else override.get(k, base.get(k)) for k in keys}  # fmt: skip
    return override


def cluster_services() -> dict[str, Any]:
    both = layered(raw(), yaml.safe_load(CLUSTER.read_text()))
    loaded: dict[str, Any] = interpolate(both, {"FORGE_GATEWAY_ADMIN_KEY": ADMIN_KEY})["services"]
    return loaded


def kafka_nodes() -> dict[str, dict[str, str]]:
    return {
        name: environment(service)
        for name, service in cluster_services().items()
        if str(service.get("image", "")).startswith("apache/kafka:")
    }


def test_three_nodes_one_quorum_every_topic_on_three_with_two_in_sync():
    nodes = kafka_nodes()
    assert len(nodes) == 3
    ids = {env["KAFKA_NODE_ID"]: name for name, env in nodes.items()}
    voters = {f"{node_id}@{name}:9093" for node_id, name in ids.items()}
    for name, env in nodes.items():
        assert set(env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")) == voters, name
        assert env["KAFKA_ADVERTISED_LISTENERS"] == f"PLAINTEXT://{name}:9092"
        for key in ("DEFAULT_REPLICATION_FACTOR", "OFFSETS_TOPIC_REPLICATION_FACTOR",
                    "TRANSACTION_STATE_LOG_REPLICATION_FACTOR"):  # fmt: skip
            assert env[f"KAFKA_{key}"] == "3", (name, key)
        assert env["KAFKA_MIN_INSYNC_REPLICAS"] == env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "2"
        assert env["KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE"] == "false"
    assert len({env["CLUSTER_ID"] for env in nodes.values()}) == 1
    assert len(ids) == 3


def test_every_service_of_ours_names_all_three_brokers(monkeypatch):
    brokers = {f"{name}:9092" for name in kafka_nodes()}
    for name, service in cluster_services().items():
        if "build" not in service:
            continue
        env = environment(service)
        assert set(env["FORGE_KAFKA_BOOTSTRAP"].split(",")) == brokers, name
        for key in list(os.environ):
            if key.startswith("FORGE_"):
                monkeypatch.delenv(key)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        assert load_settings(InfraSettings).kafka_bootstrap == env["FORGE_KAFKA_BOOTSTRAP"]


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose not installed")
def test_compose_validates_the_two_files_together():
    done = subprocess.run(
        ["docker-compose", "-f", str(COMPOSE), "-f", str(CLUSTER), "config"],
        capture_output=True, text=True, check=False, cwd=ROOT,
        env={**os.environ, "FORGE_GATEWAY_ADMIN_KEY": ADMIN_KEY},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    merged = yaml.safe_load(done.stdout)["services"]
    ours = cluster_services()
    for name in ("kafka", "kafka-2", "kafka-3", "init", "gateway", "streams", "trainer"):
        assert environment(merged[name]) == environment(ours[name]), name
