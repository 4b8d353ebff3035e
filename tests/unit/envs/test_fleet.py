"""The fleet plays any environment: a task defined here, against a stubbed gateway."""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import asdict, dataclass

import httpx

from envs.agent_launch import AgentExit
from envs.fleet import Fleet, FleetConfig, Play
from envs.task import EpisodeScore, Signal


@dataclass(frozen=True)
class EchoTask:
    task_id: str
    target: int

    def to_json(self) -> str:
        return json.dumps(asdict(self))


class EchoAgent:
    """Answers the task's target, except for target 0, where it crashes."""

    async def run(self, env, timeout_s: float) -> AgentExit:
        target = json.loads(env["FORGE_TASK"])["target"]
        if target == 0:
            return AgentExit(2, "", "no idea")
        return AgentExit(0, f"working\n{json.dumps({'answer': target})}\n", "")


class EchoEnvironment:
    name = "echo"

    def make_task(self, rng: random.Random) -> EchoTask:
        return EchoTask(f"echo-{rng.getrandbits(32):08x}", rng.randint(0, 3))

    def agent(self) -> EchoAgent:
        return EchoAgent()

    def score(self, task: EchoTask, answer: str) -> EpisodeScore:
        right = json.loads(answer)["answer"] == task.target
        return EpisodeScore((Signal(0, "format", 0.5),), float(right), right)


def test_a_new_environment_needs_no_fleet_code(tmp_path, monkeypatch):
    calls: list[tuple[str, object]] = []

    def gateway(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        calls.append((request.url.path, body))
        if request.url.path == "/rollouts":
            rid = f"r-{sum(path == '/rollouts' for path, _ in calls)}"
            return httpx.Response(200, json={"rollout_id": rid, "api_key": "k", "base_url": "u"})
        return httpx.Response(200, json={})

    env = EchoEnvironment()
    config = FleetConfig(agents=2, group_size=2, agent_timeout_s=5, seed=1)
    plays = {"default": Play(env, env.agent())}
    fleet = Fleet("http://gateway", "admin", plays, config, tmp_path / "agents.log")

    real = httpx.AsyncClient

    def stubbed(**kwargs):  # the fleet's client, talking to the stub
        return real(transport=httpx.MockTransport(gateway), **kwargs)

    monkeypatch.setattr(httpx, "AsyncClient", stubbed)
    asyncio.run(fleet.run(lambda: len(fleet.episodes) >= 6))
    opened = [body for path, body in calls if path == "/rollouts"]
    assert {b["metadata"]["task"] for b in opened} == {"echo"}
    assert all(b["group_size"] == 2 for b in opened)
    for episode in fleet.episodes:
        rid = episode.rollout_id
        if episode.status == "aborted":
            assert (f"/rollouts/{rid}/abort", {"reason": "agent exited 2: no idea"}) in calls
            continue
        assert episode.status == "solved" and episode.reward == 1.5
        signals = [{"step": 0, "name": "format", "value": 0.5}]
        verdict = {"status": "solved", "outcome_reward": 1.0, "signals": signals}
        assert (f"/rollouts/{rid}/finish", verdict) in calls
    assert len(fleet.episodes) >= 6 and fleet.in_flight == 0
    assert {e.status for e in fleet.episodes} == {"solved", "aborted"}


async def test_the_fleet_waits_as_long_as_retry_after_says(monkeypatch):
    from envs import fleet

    slept: list[float] = []

    async def sleep(delay: float) -> None:
        slept.append(delay)

    monkeypatch.setattr(fleet.asyncio, "sleep", sleep)
    answers = iter([(429, "2"), (503, "1"), (200, None)])

    def gateway(request: httpx.Request) -> httpx.Response:
        status, retry_after = next(answers)
        headers = {"Retry-After": retry_after} if retry_after else {}
        return httpx.Response(status, json={}, headers=headers)

    async with httpx.AsyncClient(transport=httpx.MockTransport(gateway), base_url="http://g") as h:
        response = await fleet.post_patiently(h, "/rollouts", {"task_id": "t"})
    assert response.status_code == 200 and slept == [2.0, 1.0]


class CountingEnvironment(EchoEnvironment):
    """Another domain's environment: its own tasks, its own name."""

    name = "count"

    def make_task(self, rng: random.Random) -> EchoTask:
        return EchoTask(f"count-{rng.getrandbits(32):08x}", rng.randint(1, 3))


def test_with_several_domains_each_group_is_of_the_domain_the_gateway_names(tmp_path, monkeypatch):
    """The gateway's mix is stubbed: it names echo, echo, count, ...; count's groups are of its
    own size (3), echo's of the run's (2); a rollout the gateway truncated is counted as such."""
    named = iter(["echo", "echo", "count"] * 20)
    calls: list[tuple[str, object]] = []

    def gateway(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/rollouts/next-domain":
            domain = next(named)
            sizes = {"echo": {"group_size": None}, "count": {"group_size": 3}}
            return httpx.Response(200, json={"domain": domain, "domains": sizes})
        body = json.loads(request.content)
        calls.append((path, body))
        if path == "/rollouts":
            rid = f"r-{sum(p == '/rollouts' for p, _ in calls)}"
            return httpx.Response(200, json={"rollout_id": rid, "api_key": "k", "base_url": "u"})
        if path.endswith("/abort"):
            message = "rollout r is already truncated: 3 consecutive steps"
            return httpx.Response(409, json={"error": {"message": message}})
        return httpx.Response(200, json={})

    plays = {"echo": Play(EchoEnvironment(), EchoAgent()),
             "count": Play(CountingEnvironment(), EchoAgent())}  # fmt: skip
    config = FleetConfig(agents=3, group_size=2, agent_timeout_s=5, seed=1)
    fleet = Fleet("http://gateway", "admin", plays, config, tmp_path / "agents.log")
    real = httpx.AsyncClient
    stub = httpx.MockTransport(gateway)
    monkeypatch.setattr(httpx, "AsyncClient", lambda **kw: real(transport=stub, **kw))
    asyncio.run(fleet.run(lambda: len(fleet.episodes) >= 14))
    opened = [body for path, body in calls if path == "/rollouts"]
    assert opened[:7] == [opened[0]] * 2 + [opened[2]] * 2 + [opened[4]] * 3
    assert [b["domain"] for b in opened[:7]] == ["echo"] * 4 + ["count"] * 3
    assert {b["metadata"]["task"] for b in opened if b["domain"] == "count"} == {"count"}
    assert {b["group_size"] for b in opened if b["domain"] == "count"} == {3}
    assert {e.domain for e in fleet.episodes} == {"echo", "count"}
    assert {e.status for e in fleet.episodes if e.reward is None} == {"truncated"}
    assert not (tmp_path / "agents.log").exists()  # a truncation is no agent failure
