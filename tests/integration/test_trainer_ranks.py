"""Two data-parallel trainer ranks (torchrun, CPU, gloo) on the real broker: the sample sequence
and losses of one rank, one publisher, and an exact resume after kill -9 of one rank."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from infra.kafka_clients import sync_consumer
from infra.log_reader import LogRange, read_log
from schemas.records import TrainStep
from schemas.topics import METRICS, POLICY
from tests.integration.logged_process import LoggedProcess
from tests.integration.test_trainer_restart import filled_train_topic, trainer_env
from trainer.launch import trainer_command

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SAMPLES = 24
BATCH = 2
STEPS = SAMPLES // BATCH


def command(topic: str, ranks: int) -> list[str]:
    """The argv ``forge-rl run --trainer-ranks`` starts, with this test's topic and steps."""
    cli = trainer_command([sys.executable, "-m", "forge_rl.cli"], ranks)
    return [*cli, "--topic", topic, "--batch-size", str(BATCH), "--max-steps", str(STEPS)]


def published_steps(kafka: str, spec) -> list[TrainStep]:
    return [d.record for d in read_log(kafka, spec, LogRange())]


def rank_process(launcher: psutil.Process, rank: int, deadline: float) -> psutil.Process:
    """The launcher's worker process of ``rank``."""
    while time.monotonic() < deadline:
        for child in launcher.children(recursive=True):
            try:
                if child.environ().get("RANK") == str(rank):
                    return child
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        time.sleep(0.2)
    raise AssertionError(f"no rank {rank} under the launcher")


def stop(proc: subprocess.Popen) -> None:
    """The launcher and its ranks (its own session), if still running."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture
def train_topic(kafka, fresh_topic):
    return filled_train_topic(kafka, fresh_topic, SAMPLES)


def test_two_ranks_killed_and_restarted_train_what_one_rank_trains(
    kafka, fresh_topic, train_topic, tmp_path
):
    metrics_a, policy_a = fresh_topic(METRICS), fresh_topic(POLICY)
    env_a = trainer_env(kafka, tmp_path / "a", metrics_a.name, policy_a.name)
    done = subprocess.run(
        command(train_topic.name, 1), env=env_a, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    one_rank = {s.step: s for s in published_steps(kafka, metrics_a)}
    assert sorted(one_rank) == list(range(1, STEPS + 1))

    metrics_b, policy_b = fresh_topic(METRICS), fresh_topic(POLICY)
    env_b = trainer_env(kafka, tmp_path / "b", metrics_b.name, policy_b.name)
    proc = LoggedProcess(
        command(train_topic.name, 2), env_b, tmp_path / "logs", start_new_session=True
    )
    try:
        deadline = time.monotonic() + 300
        rank1 = rank_process(psutil.Process(proc.pid), 1, deadline)
        watcher = sync_consumer(kafka, auto_offset_reset="earliest", enable_auto_commit=False)
        watcher.subscribe([metrics_b.name])
        seen = 0
        while seen < 2:
            assert proc.poll() is None, proc.log_tail()
            assert time.monotonic() < deadline, "the ranks made no progress"
            seen += sum(len(batch) for batch in watcher.poll(timeout_ms=50).values())
        rank1.send_signal(signal.SIGKILL)
        watcher.close()
        assert proc.wait(timeout=120) != 0  # the launcher stops rank 0 and fails
    finally:
        stop(proc)
    killed_at = len({s.step for s in published_steps(kafka, metrics_b)})
    assert killed_at < STEPS, "killed too late to test a resume"

    resumed = subprocess.run(
        command(train_topic.name, 2), env=env_b, capture_output=True, text=True, timeout=600,
        start_new_session=True,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    records = published_steps(kafka, metrics_b)
    two_ranks = {s.step: s for s in records}
    assert sorted(two_ranks) == list(range(1, STEPS + 1))
    # Equal up to float32 summation order (one rank's batch sum against gloo's all-reduce of
    # two halves): about 1e-6 absolute on losses of order 1, measured. Relative to the run's
    # loss scale, not to each loss: a step whose CISPO terms nearly cancel (loss 0.013 in one
    # run) carries the same absolute noise, 3e-4 of its own value.
    scale = sum(abs(s.loss) for s in one_rank.values()) / STEPS
    for step in range(1, STEPS + 1):
        assert two_ranks[step].sample_ids == one_rank[step].sample_ids
        assert two_ranks[step].loss == pytest.approx(one_rank[step].loss, abs=1e-4 * scale)
    # One publisher: each step once, but for the checkpoint's records the restart re-publishes.
    counts = collections.Counter(s.step for s in records)
    assert max(counts.values()) <= 2 and STEPS <= len(records) <= STEPS + 1
    versions = [d.record.version for d in read_log(kafka, policy_b, LogRange())]
    assert sorted(set(versions)) == list(range(STEPS + 1))
    assert len(versions) <= STEPS + 2
