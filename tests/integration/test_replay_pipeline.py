"""Gateway events -> replay (assemble, score, order) -> trainer -> new policy served."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter

import httpx
import numpy as np
import openai
import pytest

from infra.analytics import query_rows
from infra.kafka_clients import Delivered
from infra.log_reader import LogRange, read_log
from infra.tiny_model import save_tiny_policy
from schemas.pipeline_file import RewardConfig
from schemas.records import Envelope, ModelResponse, TrainSample
from schemas.topics import derived_train_topic
from streams.pipeline_config import PipelineConfig
from streams.replay.replay_log import ReplaySources, run_replay
from tests.gateway_harness import running_gateway
from trainer.sequences import call_sequences

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def play_group(gw, group_id, outcomes):
    for outcome in outcomes:
        rollout = gw.new_rollout(group_id=group_id, group_size=len(outcomes))
        agent = openai.OpenAI(base_url=rollout["base_url"], api_key=rollout["api_key"])
        messages = [{"role": "user", "content": "Count to three."}]
        first = agent.chat.completions.create(model="m", messages=messages, max_tokens=5, seed=1)
        messages += [
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "user", "content": "Again."},
        ]
        agent.chat.completions.create(model="m", messages=messages, max_tokens=5, seed=2)
        auth = {"Authorization": f"Bearer {rollout['api_key']}"}
        with httpx.Client(base_url=gw.url, headers=auth) as client:
            client.post(
                f"/rollouts/{rollout['rollout_id']}/signals",
                json={"step": 0, "name": "s", "value": 0.5},
            )
            client.post(
                f"/rollouts/{rollout['rollout_id']}/finish", json={"outcome_reward": outcome}
            )


def samples_on(kafka, topic):
    return [d.record for d in read_log(kafka, derived_train_topic(topic), LogRange())]


def test_replay_is_deterministic_feeds_the_trainer_and_the_engine_serves_the_result(
    kafka, analytics, tmp_path
):
    base = save_tiny_policy(tmp_path / "policies" / "base")
    with running_gateway(kafka, base) as gw:
        play_group(gw, "g1", [1.0, 0.0])
        play_group(gw, "g2", [0.0, 0.0, 1.0])
        sources = ReplaySources(gw.events, gw.queue, gw.policy)
        placed = {(d.key, d.record.rollout_id) for d in read_log(kafka, gw.events, LogRange())
                  if isinstance(d, Delivered) and isinstance(d.record, Envelope)}  # fmt: skip
        # keyed by group: Kafka's default partitioner puts a group's events on one partition
        assert sorted(Counter(key for key, _ in placed).items()) == [(b"g1", 2), (b"g2", 3)]
        config = PipelineConfig(rewards=RewardConfig(speed_weight=0.0), window=2)
        first = run_replay(
            kafka,
            LogRange(),
            f"test.replay.a.{os.getpid()}",
            config,
            sources=sources,
            sink=analytics,
        )
        second = run_replay(
            kafka, LogRange(), f"test.replay.b.{os.getpid()}", config, sources=sources
        )
        a = samples_on(kafka, f"test.replay.a.{os.getpid()}")
        b = samples_on(kafka, f"test.replay.b.{os.getpid()}")
        assert len(a) == 5 and a == b
        assert first.stats["rollout_rows"] == 5 and first.stats["call_rows"] == 10
        ids = ", ".join(f"'{s.sample_id}'" for s in a)
        _, rows = query_rows(
            analytics,
            f"SELECT count(), sum(num_calls), countIf(staleness >= 0) FROM rollouts FINAL "
            f"WHERE rollout_id IN ({ids})",
        )
        assert rows == [(5, 10, 5)]
        assert second.samples == first.samples
        for sample in a:
            calls = call_sequences([sample])
            assert len(calls) == 2 and calls[1].tokens.shape[0] > calls[0].tokens.shape[0]
            assert all(isinstance(s, TrainSample) for s in a)
        g1 = [s for s in a if s.trajectory.group_id == "g1"]
        assert sorted(s.trajectory.calls[0].advantage for s in g1) == pytest.approx([-0.5, 0.5])

        rescored = run_replay(
            kafka, LogRange(), f"test.replay.c.{os.getpid()}",
            PipelineConfig(rewards=RewardConfig(speed_weight=0.0, outcome_weight=4.0), window=2),
            sources=sources,
        )  # fmt: skip
        assert [s.sample_id for s in rescored.samples] == [s.sample_id for s in a]
        g1_rescored = [s for s in rescored.samples if s.trajectory.group_id == "g1"]
        advantages = sorted(s.trajectory.calls[0].advantage for s in g1_rescored)
        assert advantages == pytest.approx([-2.0, 2.0])

        env = {
            **os.environ, "FORGE_HOME": str(tmp_path), "FORGE_KAFKA_BOOTSTRAP": kafka,
            "FORGE_TRAINER_POLICY_TOPIC": gw.policy.name,
            "FORGE_TRAINER_METRICS_TOPIC": f"test.metrics.{os.getpid()}",
            "FORGE_TRAINER_BASE_MODEL": str(base), "HF_HUB_OFFLINE": "1",
        }  # fmt: skip
        topic = f"test.replay.a.{os.getpid()}"
        cmd = [sys.executable, "-m", "forge_rl.cli", "trainer",
               "--topic", topic, "--batch-size", "5", "--max-steps", "1"]  # fmt: skip
        trained = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        assert trained.returncode == 0, trained.stderr[-3000:]
        deadline = time.monotonic() + 60
        while httpx.get(f"{gw.url}/health").json()["policy_version"] != 1:
            assert time.monotonic() < deadline, "the gateway never served the trained policy"
            time.sleep(0.2)
        rollout = gw.new_rollout()
        agent = openai.OpenAI(base_url=rollout["base_url"], api_key=rollout["api_key"])
        agent.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=3
        )
        (response,) = [
            e.payload
            for e in gw.events_of(rollout["rollout_id"])
            if isinstance(e.payload, ModelResponse)
        ]
        assert response.policy_version == 1
        assert np.all(response.logprobs <= 0)
