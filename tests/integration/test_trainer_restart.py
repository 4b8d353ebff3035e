"""The trainer on the real broker: steps, policy versions, and an exact resume after kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from infra.kafka_clients import sync_consumer, sync_producer
from infra.log_reader import LogRange, read_log
from schemas import codec
from schemas.records import PolicyUpdated, TrainStep
from schemas.topics import METRICS, POLICY, derived_train_topic
from tests.builders import train_sample
from tests.integration.logged_process import LoggedProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SAMPLES = 40
BATCH = 2
STEPS = SAMPLES // BATCH


def trainer_cmd(topic: str) -> list[str]:
    return [
        sys.executable, "-m", "forge_rl.cli", "trainer", "--topic", topic,
        "--batch-size", str(BATCH), "--max-steps", str(STEPS),
    ]  # fmt: skip


def trainer_env(kafka: str, home, metrics: str, policy: str) -> dict[str, str]:
    """A trainer's environment; no launcher variables inherited (torchrun sets its own)."""
    env = {
        **os.environ,
        "FORGE_HOME": str(home),
        "FORGE_KAFKA_BOOTSTRAP": kafka,
        "FORGE_TRAINER_METRICS_TOPIC": metrics,
        "FORGE_TRAINER_POLICY_TOPIC": policy,
        "FORGE_TRAINER_LR": "0.01",
        "HF_HUB_OFFLINE": "1",
    }
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return env


def filled_train_topic(kafka: str, fresh_topic, samples: int):
    """A private ordered topic holding ``samples`` multi-turn samples."""
    spec = fresh_topic(derived_train_topic("forge.train"))
    producer = sync_producer(kafka)
    for i in range(samples):
        producer.send(spec.name, codec.encode(train_sample(i)))
    producer.flush()
    producer.close()
    return spec


def steps_on(kafka: str, spec) -> dict[int, TrainStep]:
    """Last record per step: re-published steps after a restart are idempotent."""
    return {d.record.step: d.record for d in read_log(kafka, spec, LogRange())}


@pytest.fixture
def train_topic(kafka, fresh_topic):
    return filled_train_topic(kafka, fresh_topic, SAMPLES)


def test_kill_and_restart_trains_the_same_samples_as_an_uninterrupted_run(
    kafka, fresh_topic, train_topic, tmp_path
):
    metrics_a, policy_a = fresh_topic(METRICS), fresh_topic(POLICY)
    env_a = trainer_env(kafka, tmp_path / "a", metrics_a.name, policy_a.name)
    done = subprocess.run(
        trainer_cmd(train_topic.name), env=env_a, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    uninterrupted = steps_on(kafka, metrics_a)
    assert sorted(uninterrupted) == list(range(1, STEPS + 1))
    versions = [d.record for d in read_log(kafka, policy_a, LogRange())]
    assert all(isinstance(v, PolicyUpdated) for v in versions)
    assert [v.version for v in versions] == list(range(STEPS + 1))
    assert os.path.isdir(versions[-1].checkpoint_uri.removeprefix("file://"))

    metrics_b, policy_b = fresh_topic(METRICS), fresh_topic(POLICY)
    env_b = trainer_env(kafka, tmp_path / "b", metrics_b.name, policy_b.name)
    proc = LoggedProcess(trainer_cmd(train_topic.name), env_b, tmp_path / "logs")
    watcher = sync_consumer(kafka, auto_offset_reset="earliest", enable_auto_commit=False)
    watcher.subscribe([metrics_b.name])
    deadline = time.monotonic() + 300
    seen = 0
    while seen < 2:
        assert proc.poll() is None, proc.log_tail()
        assert time.monotonic() < deadline, "trainer made no progress"
        seen += sum(len(batch) for batch in watcher.poll(timeout_ms=50).values())
    proc.send_signal(signal.SIGKILL)
    watcher.close()
    proc.wait()
    killed_at = len(steps_on(kafka, metrics_b))
    assert killed_at < STEPS, "killed too late to test a resume"
    resumed = subprocess.run(
        trainer_cmd(train_topic.name), env=env_b, capture_output=True, text=True, timeout=600
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    interrupted = steps_on(kafka, metrics_b)
    assert sorted(interrupted) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        assert interrupted[step].sample_ids == uninterrupted[step].sample_ids
        assert interrupted[step].loss == pytest.approx(uninterrupted[step].loss, rel=1e-5, abs=1e-7)
    trained = [sid for step in range(1, STEPS + 1) for sid in uninterrupted[step].sample_ids]
    assert trained == [f"rollout-{i}" for i in range(SAMPLES)]
    assert all(uninterrupted[s].dedup_ratio > 1.0 for s in uninterrupted)
