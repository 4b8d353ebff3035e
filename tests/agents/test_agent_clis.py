"""Agent CLIs trained as black boxes (issue 55.5): `forge-rl run` with four domains of the echo
task, each played by a real agent binary pointed at the gateway — Claude Code (`claude -p`,
Anthropic Messages), Codex (`codex exec`, OpenAI Responses), OpenCode (`opencode run`, an
OpenAI-compatible provider, Chat Completions) and mini-swe-agent (litellm, Chat Completions) —
installed from their registries by `scripts/setup_agents.sh`, headless, their HOME in a temp
dir. Every rollout of every domain finishes, every call is recorded in its dialect, and the
trainer takes a step over samples of each."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from infra.config import InfraSettings
from infra.kafka_clients import Delivered
from infra.lifecycle import infra_up, local_broker
from infra.log_reader import LogRange, read_log
from schemas.records import (
    Envelope,
    ModelRequest,
    RolloutAborted,
    RolloutFinished,
    RolloutStarted,
    TrainSample,
    TrainStep,
)
from schemas.topics import EVENTS, METRICS, TRAIN
from tests.integration.test_admission_staleness import run_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).parents[2]
DIALECTS = {"claude": "messages", "codex": "responses", "opencode": "chat.completions",
            "mini": "chat.completions"}  # fmt: skip
STEPS = 4
"""Trainer steps of two samples the run goes on for. The queue is trained in order (a window of
one) and the mix starts a quarter of the rollouts in each domain, so the first eight samples
hold every domain's."""


def write_config(home: Path, agents_env: Path) -> Path:
    (home / "pipeline.yaml").write_text(yaml.safe_dump(
        {"window": 1, "item_timeout_s": 240, "group_timeout_s": 240,
         "domains": {name: {"share": 0.25, "group_size": 1} for name in DIALECTS}}
    ))  # fmt: skip
    agent = f"{sys.executable} {ROOT / 'examples/agents/cli_agent.py'}"
    config = {
        "run": {"domains": {name: "echo" for name in DIALECTS}, "agents": 4, "group_size": 1,
                "duration_s": 600, "until_policy": STEPS, "agent_timeout_s": 300,
                "agent_cmds": {name: f"{agent} {name}" for name in DIALECTS}},
        "gateway": {"max_batch_size": 8, "batch_wait_ms": 5, "max_context_tokens": 65536,
                    "default_max_tokens": 8192},
        # a rollout of one call is a chain (a plain causal mask): Codex's 20k tokens train
        "trainer": {"batch_size": 2, "lr": 1.0e-3, "keep_policies": 4,
                    "max_sequence_tokens": 32768, "max_row_tokens": 32768},
        "streams": {"pipeline_file": "pipeline.yaml", "lateness_s": 1.0, "idle_flush_s": 2.0},
    }  # fmt: skip
    path = home / "clis.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def records(bootstrap: str, topic: object) -> list[object]:
    return [d.record for d in read_log(bootstrap, topic, LogRange()) if isinstance(d, Delivered)]


@pytest.mark.timeout(900)
def test_each_agent_cli_plays_rollouts_that_are_recorded_and_trained(tmp_path, agents_env):
    config = write_config(tmp_path, agents_env)
    infra = InfraSettings(home=tmp_path, kafka_bootstrap=None, kafka_port=0,
                          kafka_controller_port=0)  # fmt: skip
    bootstrap = infra_up(infra, with_analytics=False).bootstrap
    env = {**run_env(tmp_path), "FORGE_AGENTS_ENV": str(agents_env)}
    try:
        run = subprocess.run(
            [sys.executable, "-m", "forge_rl.cli", "--config", str(config), "run"],
            env=env, capture_output=True, text=True, timeout=840, cwd=ROOT,
        )  # fmt: skip
        agents_log = next((tmp_path / "runs").glob("*/logs/agents.log"), None)
        detail = (agents_log.read_text()[-4000:] if agents_log else "") + run.stdout[-3000:]
        assert run.returncode == 0, detail
        envelopes = [r for r in records(bootstrap, EVENTS) if isinstance(r, Envelope)]
        samples = [r for r in records(bootstrap, TRAIN) if isinstance(r, TrainSample)]
        steps = [r for r in records(bootstrap, METRICS) if isinstance(r, TrainStep)]
    finally:
        local_broker(infra).down(purge=True)
    domain_of = {e.rollout_id: e.payload.domain for e in envelopes
                 if isinstance(e.payload, RolloutStarted)}  # fmt: skip
    ended = Counter((domain_of[e.rollout_id], type(e.payload).__name__) for e in envelopes
                    if isinstance(e.payload, RolloutFinished | RolloutAborted))  # fmt: skip
    for name, dialect in DIALECTS.items():
        assert ended[(name, "RolloutFinished")] >= 1 and ended[(name, "RolloutAborted")] == 0, (
            name, ended, detail)  # fmt: skip
        endpoints = {e.payload.endpoint for e in envelopes if isinstance(e.payload, ModelRequest)
                     and domain_of[e.rollout_id] == name}  # fmt: skip
        assert endpoints == {dialect}, (name, endpoints)
    trained = {sid for step in steps for sid in step.sample_ids}
    trained_domains = {s.trajectory.domain for s in samples if s.sample_id in trained}
    assert trained_domains == set(DIALECTS), (trained_domains, len(samples), len(steps))
