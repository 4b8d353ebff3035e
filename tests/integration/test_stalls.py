"""A worker whose commits cannot go through says so: its ``/health`` answers 503 naming the
stage once it has gone the stall limit without a success, and 200 again once a commit goes
through — here forge.trajectories refuses every batch as too large, then takes them again
(``streams.stalls``). The samples then come out as a replay says.

Not ``min.insync.replicas`` above the copies a topic has: Kafka 4.4 takes acks=all writes to a
topic of one copy asking two (measured), so one broker cannot hold an attempt open that way;
a cluster below its in-sync minimum is the never-ending attempt the unit tests hold."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx
import pytest
from kafka.admin import ConfigResource, ConfigResourceType

from infra.kafka_clients import admin_client
from schemas.topics import TRAJECTORIES
from tests.integration.logged_process import LoggedProcess
from tests.integration.test_streams_worker import prepared_log, stop, train_samples

pytestmark = [pytest.mark.integration, pytest.mark.slow]
WORKER = [sys.executable, "-m", "forge_rl.cli", "streams"]


def set_max_message_bytes(kafka: str, topic: str, size: str) -> None:
    admin = admin_client(kafka, 30)
    try:
        resource = ConfigResource(
            ConfigResourceType.TOPIC, topic, configs={"max.message.bytes": size}
        )
        admin.alter_configs([resource])
    finally:
        admin.close()


def health(port: int) -> tuple[int, dict]:
    try:
        reply = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
    except httpx.HTTPError:
        return 0, {}
    return reply.status_code, reply.json()


def wait_for_health(
    port: int, status: int, worker, naming: str = "", timeout_s: float = 120
) -> dict:
    """The first ``/health`` body answered with ``status`` that names a stage ending with
    ``naming`` (a stage that waits — a partition's first watermarks at start — may be named
    before the commits are, at a limit of 5 s)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert worker.poll() is None, worker.log_tail()
        code, body = health(port)
        if code == status and (not naming or any(s.endswith(naming) for s in body["stalled"])):
            return body
        time.sleep(1)
    raise AssertionError(f"/health never answered {status}: {health(port)}\n{worker.log_tail()}")


def test_commits_failing_past_the_limit_are_a_503_naming_the_stage_until_one_goes_through(
    kafka, tmp_path
):
    names, _, train, reference, env = prepared_log(kafka, tmp_path, 16, garbage=False)
    trajectories = names[TRAJECTORIES.name]
    # Every batch of trajectories (~340 bytes) refused; the transactions' markers (~80) not: a
    # marker refused would keep the coordinator's abort from ending (CONCURRENT_TRANSACTIONS).
    set_max_message_bytes(kafka, trajectories, "160")
    env = {**env, "FORGE_STREAMS_SINK": "false", "FORGE_STREAMS_STALL_LIMIT_S": "5"}
    port = int(env["FORGE_STREAMS_WEB_PORT"])
    worker = LoggedProcess(WORKER, env, Path(env["FORGE_HOME"]) / "logs")
    try:
        body = wait_for_health(port, 503, worker, naming=" commits")
        assert body["status"] == "stalled"
        stalled = [s for s in body["stalled"] if s.endswith(" commits")]
        assert stalled and all(s.startswith("events partition ") for s in stalled), body
        assert all(why.startswith("no success for ") for why in body["stalled"].values()), body
        assert train_samples(kafka, train.name) == []
        set_max_message_bytes(kafka, trajectories, TRAJECTORIES.configs["max.message.bytes"])
        assert wait_for_health(port, 200, worker) == {"status": "ok", "stalled": {}}
        deadline = time.monotonic() + 120
        while len(train_samples(kafka, train.name)) < len(reference.samples):
            assert time.monotonic() < deadline, worker.log_tail()
            time.sleep(0.5)
    finally:
        stop(worker)
    assert train_samples(kafka, train.name) == reference.samples
