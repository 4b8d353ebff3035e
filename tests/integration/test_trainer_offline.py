"""An offline run (any input topic but forge.train) on the real broker: it publishes to
topics derived from its input, configured like the live ones, writes its own directories,
leaves forge.policy and forge.metrics untouched, and dead-letters what it cannot train."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest
from kafka import TopicPartition
from kafka.admin import ConfigResource

from infra.kafka_clients import admin_client, sync_consumer, sync_producer
from infra.log_reader import LogRange, read_log
from schemas import codec
from schemas.records import DeadLetter, PolicyUpdated, Record, TrainStep
from schemas.topics import DLQ, METRICS, POLICY, TopicSpec, derived_train_topic
from tests.builders import train_sample
from trainer.config import TrainerSettings
from trainer.outputs import resolve_outputs
from trainer.policy_export import missing_files

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def end_offset(kafka: str, name: str) -> int:
    consumer = sync_consumer(kafka)
    try:
        tp = TopicPartition(name, 0)
        return int(consumer.end_offsets([tp])[tp])
    finally:
        consumer.close()


def topic_configs(kafka: str, name: str, keys: list[str]) -> dict[str, str]:
    admin = admin_client(kafka, timeout_s=30)
    try:
        found = admin.describe_configs([ConfigResource("TOPIC", name)], config_filter="all")
    finally:
        admin.close()
    (entries,) = [v for by_name in found.values() for n, v in by_name.items() if n == name]
    return {k: str(entries[k]["value"]) for k in keys}


def records(kafka: str, spec: TopicSpec) -> list[Record]:
    """Every record of the topic; one that does not decode fails the test."""
    read = list(read_log(kafka, spec, LogRange()))
    assert not [d for d in read if isinstance(d, DeadLetter)], f"undecodable on {spec.name}"
    return [d.record for d in read if not isinstance(d, DeadLetter)]


def test_an_offline_run_publishes_only_to_its_own_topics(kafka, fresh_topic, tmp_path):
    source = fresh_topic(derived_train_topic("forge.train"))
    broken = train_sample(90)
    broken.trajectory.calls[1].logprobs = broken.trajectory.calls[1].logprobs[:-1]
    producer = sync_producer(kafka)
    for value in (
        codec.encode(train_sample(0)),
        codec.encode(broken),  # untrainable: 4 log-probs for 5 completion tokens
        b"not a record",  # undecodable
        codec.encode(train_sample(1)),
        codec.encode(train_sample(2)),  # beyond the one step
    ):
        producer.send(source.name, value, key=b"k")
    producer.flush()
    producer.close()
    live_before = {t.name: end_offset(kafka, t.name) for t in (POLICY, METRICS)}

    env = {**os.environ, "FORGE_HOME": str(tmp_path), "FORGE_KAFKA_BOOTSTRAP": kafka,
           "HF_HUB_OFFLINE": "1"}  # fmt: skip
    for name in [k for k in env if k.startswith("FORGE_TRAINER_")]:
        del env[name]
    done = subprocess.run(
        [sys.executable, "-m", "forge_rl.cli", "trainer", "--topic", source.name,
         "--batch-size", "2", "--max-steps", "1"],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]

    assert {t.name: end_offset(kafka, t.name) for t in (POLICY, METRICS)} == live_before
    out = resolve_outputs(TrainerSettings(topic=source.name), tmp_path)
    assert out.policy.name == f"{source.name}.policy"
    assert topic_configs(kafka, out.policy.name, ["retention.ms", "compression.type"]) == {
        "retention.ms": "-1", "compression.type": "zstd",
    }  # fmt: skip
    assert topic_configs(kafka, out.metrics.name, ["retention.ms"]) == {"retention.ms": "-1"}

    versions = records(kafka, out.policy)
    assert all(isinstance(v, PolicyUpdated) for v in versions)
    assert [v.version for v in versions] == [0, 1]
    for v in versions:
        assert v.checkpoint_uri.startswith((tmp_path / "offline" / source.name).as_uri())
        assert missing_files(Path(urlparse(v.checkpoint_uri).path)) == []  # self-contained HF dir
    (step,) = records(kafka, out.metrics)
    assert isinstance(step, TrainStep)
    assert step.sample_ids == ["rollout-0", "rollout-1"]
    assert step.dead_lettered == 2 and not step.skipped_nonfinite
    assert not (tmp_path / "trainer").exists()
    assert [p.name for p in (tmp_path / "policies").iterdir()] == ["base"]

    letters = [d for d in records(kafka, DLQ) if isinstance(d, DeadLetter)]
    letters = [d for d in letters if d.source_topic == source.name]
    assert [d.offset for d in letters] == [1, 2]
    assert "invalid trajectory" in letters[0].reason and "4 log-probs" in letters[0].reason
    assert letters[0].value == codec.encode(broken) and letters[0].consumer == "forge-trainer"
    assert "bad magic" in letters[1].reason
