from __future__ import annotations

import pytest

from infra import kafka_runtime
from schemas.errors import InfraError


def test_missing_java_is_named(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(InfraError, match=r"Java 17\+ is required.*not on PATH"):
        kafka_runtime.find_java()


def test_missing_maven_without_cached_jars_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(InfraError, match=r"Maven \(`mvn`\) is not on PATH"):
        kafka_runtime.kafka_jars("4.4.0", tmp_path)


def test_cached_jars_need_no_maven(monkeypatch, tmp_path):
    lib = tmp_path / "kafka-4.4.0" / "lib"
    lib.mkdir(parents=True)
    (tmp_path / "kafka-4.4.0" / ".complete").touch()
    monkeypatch.setenv("PATH", "/nonexistent")
    assert kafka_runtime.kafka_jars("4.4.0", tmp_path) == lib


def test_cluster_ids_never_look_like_options():
    from infra.local_broker import new_cluster_id

    ids = [new_cluster_id() for _ in range(2000)]
    assert not any(i.startswith("-") for i in ids)
    assert all(len(i) == 22 for i in ids)


@pytest.mark.parametrize("delay_ms", [0, 3000])
def test_the_broker_config_carries_the_initial_rebalance_delay(tmp_path, delay_ms):
    from infra.local_broker import LocalBroker

    broker = LocalBroker(tmp_path, version="4.4.0", cache_dir=tmp_path, port=1, controller_port=2,
                         initial_rebalance_delay_ms=delay_ms)  # fmt: skip
    lines = broker._write_config(9092, 9093).read_text().splitlines()
    assert f"group.initial.rebalance.delay.ms={delay_ms}" in lines
