"""Agents never see forge's secrets: the admin key and every other FORGE_* variable stay behind."""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys

import httpx
import pytest

from envs.agent_launch import (
    AgentExit,
    CommandLauncher,
    ForkedLauncher,
    Launcher,
    agent_environment,
)
from envs.fleet import Fleet, FleetConfig, Play
from envs.guess.task import GuessEnvironment

SECRETS = {
    "FORGE_GATEWAY_ADMIN_KEY": "admin-key-must-not-leak",
    "FORGE_CLICKHOUSE_URL": "http://forge:password-must-not-leak@db:8123",
    "forge_trainer_hub_token": "lower-case-is-read-by-pydantic-too",
}


def dump_environ() -> None:
    print(json.dumps(dict(os.environ)))


class Recording:
    """Keeps what the agent printed: the fleet itself only reads the last line as an answer."""

    def __init__(self, inner: Launcher) -> None:
        self.inner = inner
        self.exits: list[AgentExit] = []

    async def run(self, env, timeout_s: float) -> AgentExit:
        exit_ = await self.inner.run(env, timeout_s)
        self.exits.append(exit_)
        return exit_


def agent_sees(launcher: Launcher, tmp_path) -> dict[str, str]:
    """One episode through the fleet, as `forge-rl run` drives it; the gateway is stubbed."""
    recording = Recording(launcher)
    env = GuessEnvironment(max_turns=4)
    config = FleetConfig(agents=4, group_size=4, agent_timeout_s=60)
    play = Play(env, recording)
    fleet = Fleet("http://gateway", "admin", {"default": play}, config, tmp_path / "agents.log")
    rollout = {"rollout_id": "r-1", "base_url": "http://gateway/r/r-1/v1", "api_key": "rk-1"}
    task = env.make_task(random.Random(0))

    def gateway(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=rollout if request.url.path == "/rollouts" else {})

    async def episode() -> None:
        stub = httpx.MockTransport(gateway)
        async with httpx.AsyncClient(base_url="http://gateway", transport=stub) as http:
            await fleet._episode(http, play, "default", task, 4, asyncio.Semaphore(0))

    asyncio.run(episode())
    (exit_,) = recording.exits
    assert exit_.code == 0, exit_.stderr
    seen: dict[str, str] = json.loads(exit_.last_line)
    assert seen["FORGE_TASK"] == task.to_json()
    return seen


@pytest.mark.parametrize("kind", ["command", "forked"])
def test_agents_get_their_contract_and_the_environment_but_no_forge_secret(
    kind, monkeypatch, tmp_path
):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("OPENAI_API_KEY", "the-operator's-own-key")
    monkeypatch.setenv("LANG", "C.UTF-8")
    dump = "import json, os; print(json.dumps(dict(os.environ)))"
    launcher: Launcher = (
        CommandLauncher(f"{sys.executable} -c '{dump}'")
        if kind == "command"
        else ForkedLauncher(dump_environ, ["json"])
    )
    seen = agent_sees(launcher, tmp_path)
    leaked = {k for k, v in seen.items() if k in SECRETS or v in SECRETS.values()}
    assert not leaked
    assert {k for k in seen if k.upper().startswith("FORGE_")} == {"FORGE_TASK", "FORGE_ROLLOUT_ID"}
    assert seen["OPENAI_API_KEY"] == "rk-1"  # the rollout's key, not the operator's
    assert seen["OPENAI_BASE_URL"] == "http://gateway/r/r-1/v1"
    for kept in ("PATH", "LANG"):
        assert seen[kept] == os.environ[kept]


def test_an_episode_cannot_hand_on_the_runners_environment_either(monkeypatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    env = agent_environment({**os.environ, "FORGE_TASK": "{}", "OPENAI_API_KEY": "rk-1"})
    assert not set(SECRETS) & set(env)
    assert env["FORGE_TASK"] == "{}" and env["OPENAI_API_KEY"] == "rk-1"
    assert env["PATH"] == os.environ["PATH"]
