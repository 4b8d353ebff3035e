"""Gateway state is a projection of the log: a gateway killed with -9 and restarted, or a
second replica, serves a rollout with the same base URL and key and an unbroken delta chain."""

from __future__ import annotations

import itertools
import os
import signal
import sys
import threading
import time
import uuid
from datetime import UTC, datetime

import httpx
import openai
import pytest

from infra.kafka_clients import ensure_topics, sync_producer
from infra.local_broker import free_port
from infra.log_reader import LogRange, read_log
from infra.tiny_model import save_tiny_policy
from schemas import codec
from schemas.records import Envelope, ModelRequest, RolloutAborted, RolloutStarted
from schemas.topics import EVENTS, METRICS, POLICY, QUEUE, TopicSpec
from tests.integration.logged_process import LoggedProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ADMIN_KEY = "recovery-admin-key-0123456789"
CHAT = [{"role": "user", "content": "Guess a digit."}]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_policy(tmp_path_factory.mktemp("policy") / "base")


@pytest.fixture
def topics(kafka):
    suffix = uuid.uuid4().hex[:8]
    specs = {s.name: TopicSpec(f"test.{s.name}.{suffix}", s.record, s.partitions, s.configs)
             for s in (EVENTS, QUEUE, POLICY, METRICS)}  # fmt: skip
    ensure_topics(kafka, tuple(specs.values()), timeout_s=30)
    return specs


class Gateway:
    """``forge-rl gateway`` as its own process, so it can be killed with -9."""

    def __init__(self, kafka, model_dir, topics, tmp_path, port: int, **settings: str) -> None:
        self.port, self.url = port, f"http://127.0.0.1:{port}"
        self.log_dir = tmp_path / "logs"
        self.env = {
            **os.environ, "FORGE_HOME": str(tmp_path), "FORGE_KAFKA_BOOTSTRAP": kafka,
            "FORGE_GATEWAY_ADMIN_KEY": ADMIN_KEY, "FORGE_GATEWAY_MODEL_DIR": str(model_dir),
            "FORGE_GATEWAY_EVENTS_TOPIC": topics[EVENTS.name].name,
            "FORGE_GATEWAY_QUEUE_TOPIC": topics[QUEUE.name].name,
            "FORGE_GATEWAY_POLICY_TOPIC": topics[POLICY.name].name,
            "FORGE_GATEWAY_METRICS_TOPIC": topics[METRICS.name].name,
            **{f"FORGE_GATEWAY_{k.upper()}": v for k, v in settings.items()},
        }  # fmt: skip
        self.proc: LoggedProcess | None = None

    def start(self) -> Gateway:
        cmd = [sys.executable, "-m", "forge_rl.cli", "gateway", "--port", str(self.port)]
        self.proc = LoggedProcess(cmd, self.env, self.log_dir)
        deadline = time.monotonic() + 120
        while True:
            assert self.proc.poll() is None, self.proc.log_tail()
            assert time.monotonic() < deadline, "the gateway did not start"
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.2)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)

    def new_rollout(self) -> dict:
        headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
        response = httpx.post(f"{self.url}/rollouts", json={"task_id": "t"}, headers=headers)
        assert response.status_code == 200, response.text
        return response.json()


def agent(rollout: dict, url: str | None = None) -> openai.OpenAI:
    base = rollout["base_url"] if url is None else f"{url}/rollouts/{rollout['rollout_id']}/v1"
    return openai.OpenAI(base_url=base, api_key=rollout["api_key"], max_retries=0)


def events_of(kafka, topics, rollout_id) -> list:
    return [
        d.record.payload for d in read_log(kafka, topics[EVENTS.name], LogRange())
        if isinstance(d.record, Envelope) and d.record.rollout_id == rollout_id
    ]  # fmt: skip


def wait_for_metric(url: str, line: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while line not in httpx.get(f"{url}/metrics").text:
        assert time.monotonic() < deadline, f"{line!r} never appeared in {url}/metrics"
        time.sleep(0.05)


def turn(client, history, **kwargs):
    reply = client.chat.completions.create(model="m", messages=history, max_tokens=4, **kwargs)
    return [*history, {"role": "assistant", "content": reply.choices[0].message.content or ""},
            {"role": "user", "content": "higher"}]  # fmt: skip


def test_a_gateway_killed_mid_call_and_restarted_serves_the_same_rollout(
    kafka, model_dir, topics, tmp_path
):
    # A batch is served when it is full (2 rows) or after 10 minutes: a one-row call stays in
    # the engine until the kill, however fast the machine; two-row calls are served at once.
    held = {"max_batch_size": "2", "batch_wait_ms": "600000"}
    gw = Gateway(kafka, model_dir, topics, tmp_path, free_port(), **held).start()
    try:
        rollout = gw.new_rollout()
        history = turn(agent(rollout), CHAT, seed=1, n=2)
        outcome: list[BaseException] = []

        def held_call() -> None:  # cut off by the kill
            try:
                agent(rollout).chat.completions.create(model="m", messages=history, max_tokens=4)
            except openai.APIConnectionError as exc:
                outcome.append(exc)

        in_flight = threading.Thread(target=held_call)
        in_flight.start()
        wait_for_metric(gw.url, "forge_gateway_calls_in_flight 1.0")
        gw.kill()
        in_flight.join()
        assert outcome, "the call was answered although the gateway was killed"
        gw.start()  # same port: the agent keeps its base URL and key
        history = turn(agent(rollout), history, seed=2, n=2)
        with httpx.Client(base_url=gw.url) as http:
            key = {"Authorization": f"Bearer {rollout['api_key']}"}
            assert http.post(f"/rollouts/{rollout['rollout_id']}/finish", json={},
                             headers=key).status_code == 200  # fmt: skip
    finally:
        gw.stop()
    requests = [p for p in events_of(kafka, topics, rollout["rollout_id"])
                if isinstance(p, ModelRequest)]  # fmt: skip
    assert requests[-1].parent_call_id in {r.call_id for r in requests[:-1]}
    assert requests[-1].shared_prefix_len > 0


def test_a_rollout_that_cannot_be_resumed_is_aborted_with_its_reason(
    kafka, model_dir, topics, tmp_path
):
    old = Envelope(str(uuid.uuid4()), "r-older-gateway", datetime.now(UTC), "gateway",
                   RolloutStarted("t", "g", 1, 0, {}, 0))  # no key hash  # fmt: skip
    producer = sync_producer(kafka)
    producer.send(topics[EVENTS.name].name, codec.encode(old), key=b"r-older-gateway").get(30)
    producer.close()
    gw = Gateway(kafka, model_dir, topics, tmp_path, free_port()).start()
    gw.stop()
    (aborted,) = [p for p in events_of(kafka, topics, "r-older-gateway")
                  if isinstance(p, RolloutAborted)]  # fmt: skip
    assert "not resumable" in aborted.reason and "key hash" in aborted.reason


def test_an_agent_alternating_between_two_replicas_keeps_one_delta_chain(
    kafka, model_dir, topics, tmp_path
):
    replicas = [
        Gateway(kafka, model_dir, topics, tmp_path, free_port(), replicas="2").start()
        for _ in range(2)
    ]
    try:
        rollout = replicas[0].new_rollout()
        history = CHAT
        for i in range(4):
            history = turn(agent(rollout, replicas[i % 2].url), history, seed=i)
    finally:
        for gw in replicas:
            gw.stop()
    requests = [p for p in events_of(kafka, topics, rollout["rollout_id"])
                if isinstance(p, ModelRequest)]  # fmt: skip
    assert len(requests) == 4
    for earlier, later in itertools.pairwise(requests):
        assert later.parent_call_id == earlier.call_id and later.shared_prefix_len > 0
