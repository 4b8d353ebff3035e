"""The fleet: tasks in groups, one agent process per rollout, verification.

For every task of its environment the fleet opens a group of rollouts at the gateway (admin
key), starts one agent per rollout with nothing but OPENAI_BASE_URL, OPENAI_API_KEY and
FORGE_TASK, has the environment verify what each agent reports, and closes its rollout:
process signals and finish, or abort with the reason when the agent crashed, timed out or
answered nonsense. It knows no task: everything task-specific is behind ``Environment``.
With several domains, each group is of the domain the gateway's mix names next
(``GET /rollouts/next-domain``), so what is trained meets the pipeline file's shares.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic

import httpx

from envs.agent_launch import AgentExit, Launcher
from envs.task import Environment, EpisodeScore, T, TaskSpec

TRUNCATED = "truncated"
"""The status of a rollout the gateway ended early as hopeless (its 409 says so)."""


@dataclass(frozen=True)
class Play(Generic[T]):
    """A domain as the fleet plays it: its environment and the agent that plays it."""

    environment: Environment[T]
    launcher: Launcher


@dataclass(frozen=True)
class FleetConfig:
    agents: int
    """Agent processes at once."""
    group_size: int
    """Rollouts per task, started together."""
    agent_timeout_s: float
    seed: int = 0


@dataclass(frozen=True)
class Episode:
    rollout_id: str
    started: float
    ended: float
    status: str
    """solved, unsolved, aborted, or truncated (ended early by the gateway as hopeless)."""
    reward: float | None
    """The task's reward (outcome + process signals); None when aborted or truncated."""
    turns: int
    domain: str = "default"


def verdict(environment: Environment[T], task: T, exit_: AgentExit) -> EpisodeScore | str:
    """The episode's score, or why it is aborted."""
    if exit_.code != 0:
        last = exit_.stderr.strip().splitlines()[-1:] or ["no stderr"]
        return f"agent exited {exit_.code}: {last[0][:200]}"
    try:
        return environment.score(task, exit_.last_line)
    except ValueError as exc:
        return f"agent gave no answer: {exc}"


class Fleet:
    def __init__(
        self,
        gateway_url: str,
        admin_key: str,
        plays: Mapping[str, Play[Any]],
        config: FleetConfig,
        failure_log: Path,
    ) -> None:
        """``plays``: by domain name; one named ``default`` is the gateway's default domain."""
        self.gateway_url = gateway_url
        self.admin_key = admin_key
        self.plays = dict(plays)
        self.config = config
        self.failure_log = failure_log
        self.episodes: list[Episode] = []
        self.in_flight = 0

    async def run(self, should_stop: Callable[[], bool]) -> None:
        """Keep ``agents`` episodes going, a whole group at a time, until told to stop."""
        s = self.config
        rng = random.Random(s.seed)
        slots = asyncio.Semaphore(s.agents)
        running: set[asyncio.Task[None]] = set()
        finished: list[asyncio.Task[None]] = []
        auth = {"Authorization": f"Bearer {self.admin_key}"}
        async with httpx.AsyncClient(base_url=self.gateway_url, headers=auth, timeout=60) as http:
            try:
                while not should_stop():
                    domain, size = await self._next_domain(http)
                    for _ in range(size):
                        await slots.acquire()
                    if should_stop():
                        for _ in range(size):
                            slots.release()
                        break
                    play = self.plays[domain]
                    task = play.environment.make_task(rng)
                    for _ in range(size):  # each agent starts as soon as its rollout is open
                        episode = self._episode(http, play, domain, task, size, slots)
                        job = asyncio.create_task(episode)
                        running.add(job)
                        job.add_done_callback(running.discard)
                        job.add_done_callback(finished.append)
                    for job in finished:  # a gateway that refuses a start stops the fleet
                        if not job.cancelled():
                            job.result()
                    finished.clear()
                await asyncio.gather(*running)
            finally:
                for job in running:
                    job.cancel()
                await asyncio.gather(*running, return_exceptions=True)

    async def _next_domain(self, http: httpx.AsyncClient) -> tuple[str, int]:
        """The domain of the next group and its size: the gateway's mix decides among several."""
        if len(self.plays) == 1:
            return next(iter(self.plays)), self.config.group_size
        response = await post_patiently(http, "/rollouts/next-domain", None, method="GET")
        response.raise_for_status()
        answer = response.json()
        domain = answer["domain"]
        if domain not in self.plays:
            raise ValueError(f"the gateway names domain {domain!r}, which this run does not play")
        return domain, answer["domains"][domain]["group_size"] or self.config.group_size

    async def _open_rollout(
        self, http: httpx.AsyncClient, play: Play[Any], domain: str, task: TaskSpec, size: int
    ) -> dict[str, Any]:
        """One member of the task's group (the gateway admits a group whole: its first member
        reserves room for all, so members opened at once all get in)."""
        body = {"task_id": task.task_id, "group_id": f"g-{task.task_id}", "group_size": size,
                "domain": domain, "metadata": {"task": play.environment.name}}  # fmt: skip
        response = await post_patiently(http, "/rollouts", body)
        response.raise_for_status()
        rollout: dict[str, Any] = response.json()
        return rollout

    async def _episode(
        self,
        http: httpx.AsyncClient,
        play: Play[Any],
        domain: str,
        task: TaskSpec,
        size: int,
        slots: asyncio.Semaphore,
    ) -> None:
        self.in_flight += 1
        try:
            rollout = await self._open_rollout(http, play, domain, task, size)
        except BaseException:
            self.in_flight -= 1
            slots.release()
            raise
        rid = rollout["rollout_id"]
        env = {  # the launcher adds the rest of the environment, forge's secrets left out
            "OPENAI_BASE_URL": rollout["base_url"],
            "OPENAI_API_KEY": rollout["api_key"],
            "FORGE_TASK": task.to_json(),
            "FORGE_ROLLOUT_ID": rid,
        }
        started = time.time()
        try:
            exit_ = await play.launcher.run(env, self.config.agent_timeout_s)
            score = verdict(play.environment, task, exit_)
            if isinstance(score, str):
                closed = await _close(http, f"/rollouts/{rid}/abort", {"reason": score})
                status = TRUNCATED if _truncated(closed) else "aborted"
                if status == "aborted":  # a truncated agent's failure is the gateway's doing
                    self._record_failure(rid, score, exit_)
                self.episodes.append(Episode(rid, started, time.time(), status, None, 0, domain))
                return
            signals = [s._asdict() for s in score.signals]
            status = "solved" if score.solved else "unsolved"
            verdict_body = {"status": status, "outcome_reward": score.outcome, "signals": signals}
            closed = await _close(http, f"/rollouts/{rid}/finish", verdict_body)
            if _truncated(closed):  # it answered, but after the gateway had ended it
                status, reward = TRUNCATED, None
            else:
                reward = score.total
            self.episodes.append(
                Episode(rid, started, time.time(), status, reward, len(score.signals), domain)
            )
        finally:
            self.in_flight -= 1
            slots.release()

    def _record_failure(self, rollout_id: str, problem: str, exit_: AgentExit) -> None:
        with self.failure_log.open("a") as log:
            log.write(f"--- {rollout_id}: {problem}\n{exit_.stderr[-4000:]}\n")


RETRY_STATUSES = (429, 503)
MAX_PATIENCE_S = 600.0


async def post_patiently(
    http: httpx.AsyncClient, path: str, body: Any, method: str = "POST"
) -> httpx.Response:
    """POST, waiting as long as the gateway's Retry-After says while it answers 429 (the active
    buffer is full) or 503 (the log is unavailable), up to ``MAX_PATIENCE_S`` in all."""
    waited = 0.0
    while True:
        response = await http.request(method, path, json=body)
        if response.status_code not in RETRY_STATUSES or waited >= MAX_PATIENCE_S:
            return response
        delay = float(response.headers.get("retry-after", "1"))
        await asyncio.sleep(delay)
        waited += delay


async def _close(http: httpx.AsyncClient, path: str, body: Any) -> httpx.Response:
    """POST a lifecycle call; 409 means the gateway already closed the rollout (its timeout,
    or its truncation)."""
    response = await post_patiently(http, path, body)
    if response.status_code != 409:
        response.raise_for_status()
    return response


def _truncated(closed: httpx.Response) -> bool:
    """The gateway had already ended the rollout as truncated."""
    return closed.status_code == 409 and f"already {TRUNCATED}" in closed.text
