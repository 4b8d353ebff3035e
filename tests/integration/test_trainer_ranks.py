"""Two data-parallel trainer ranks (torchrun, CPU, gloo) on the real broker: the sample sequence
and losses of one rank, one publisher, and an exact resume after kill -9 of one rank and after a
SIGTERM to the launcher (a clean stop: exit 0, no traceback)."""

from __future__ import annotations

import collections
import dataclasses
import os
import signal
import subprocess
import sys
import time
import uuid

import psutil
import pytest

from infra.kafka_clients import ensure_topics, sync_consumer
from infra.log_reader import LogRange, read_log
from schemas.records import TrainStep
from schemas.topics import METRICS, POLICY, TopicSpec
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


def private_topic(kafka: str, spec: TopicSpec) -> TopicSpec:
    private = dataclasses.replace(spec, name=f"test.{spec.name}.{uuid.uuid4().hex[:8]}")
    ensure_topics(kafka, (private,), timeout_s=30)
    return private


@pytest.fixture(scope="module")
def train_topic(kafka):
    return filled_train_topic(kafka, lambda spec: private_topic(kafka, spec), SAMPLES)


@pytest.fixture(scope="module")
def one_rank(kafka, train_topic, tmp_path_factory) -> dict[int, TrainStep]:
    """The steps of one uninterrupted rank on ``train_topic``: what every test compares to."""
    metrics, policy = private_topic(kafka, METRICS), private_topic(kafka, POLICY)
    env = trainer_env(kafka, tmp_path_factory.mktemp("one"), metrics.name, policy.name)
    done = subprocess.run(
        command(train_topic.name, 1), env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    steps = {s.step: s for s in published_steps(kafka, metrics)}
    assert sorted(steps) == list(range(1, STEPS + 1))
    return steps


def interrupted_after_two_steps(
    kafka: str, train_topic: TopicSpec, env: dict[str, str], metrics: TopicSpec, logs, interrupt
) -> LoggedProcess:
    """Two ranks started in a session of their own, ``interrupt``-ed (given the launcher) once
    two steps are published; the launcher, still to be waited for."""
    proc = LoggedProcess(command(train_topic.name, 2), env, logs, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        launcher = psutil.Process(proc.pid)
        rank_process(launcher, 1, deadline)
        watcher = sync_consumer(kafka, auto_offset_reset="earliest", enable_auto_commit=False)
        watcher.subscribe([metrics.name])
        seen = 0
        while seen < 2:
            assert proc.poll() is None, proc.log_tail()
            assert time.monotonic() < deadline, "the ranks made no progress"
            seen += sum(len(batch) for batch in watcher.poll(timeout_ms=50).values())
        interrupt(launcher)
        watcher.close()
    except BaseException:
        stop(proc)
        raise
    return proc


def resumed_equals_one_rank(
    kafka: str, train_topic: TopicSpec, env, metrics, policy, one_rank: dict[int, TrainStep]
) -> None:
    """A restart of two ranks completes the run: every step once (but the checkpoint's,
    re-published), each on the samples and with the loss of one uninterrupted rank."""
    stopped_at = len({s.step for s in published_steps(kafka, metrics)})
    assert stopped_at < STEPS, "interrupted too late to test a resume"
    resumed = subprocess.run(
        command(train_topic.name, 2), env=env, capture_output=True, text=True, timeout=600,
        start_new_session=True,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    records = published_steps(kafka, metrics)
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
    versions = [d.record.version for d in read_log(kafka, policy, LogRange())]
    assert sorted(set(versions)) == list(range(STEPS + 1))
    assert len(versions) <= STEPS + 2


def test_two_ranks_killed_and_restarted_train_what_one_rank_trains(
    kafka, fresh_topic, train_topic, one_rank, tmp_path
):
    metrics, policy = fresh_topic(METRICS), fresh_topic(POLICY)
    env = trainer_env(kafka, tmp_path / "b", metrics.name, policy.name)

    def kill_rank_one(launcher: psutil.Process) -> None:
        rank_process(launcher, 1, time.monotonic() + 10).send_signal(signal.SIGKILL)

    proc = interrupted_after_two_steps(
        kafka, train_topic, env, metrics, tmp_path / "logs", kill_rank_one
    )
    try:
        assert proc.wait(timeout=120) != 0  # the launcher stops rank 0 and fails
    finally:
        stop(proc)
    resumed_equals_one_rank(kafka, train_topic, env, metrics, policy, one_rank)


def test_sigterm_to_two_ranks_is_a_clean_stop_that_resumes_exactly(
    kafka, fresh_topic, train_topic, one_rank, tmp_path
):
    """A user's ``kill`` of the launcher (``forge-rl run`` signals the launcher's whole
    process group, which the ranks handle the same way)."""
    metrics, policy = fresh_topic(METRICS), fresh_topic(POLICY)
    env = trainer_env(kafka, tmp_path / "b", metrics.name, policy.name)
    proc = interrupted_after_two_steps(
        kafka, train_topic, env, metrics, tmp_path / "logs",
        lambda launcher: launcher.send_signal(signal.SIGTERM),
    )  # fmt: skip
    try:
        assert proc.wait(timeout=120) == 0, proc.log_tail()
    finally:
        stop(proc)
    log = proc.log_path.read_text(errors="replace")
    assert "Traceback" not in log and "SignalException" not in log, log[-3000:]
    resumed_equals_one_rank(kafka, train_topic, env, metrics, policy, one_rank)
