"""The environment side of a run: tasks in groups, one agent process per rollout, verification.

For every task the fleet opens a group of rollouts at the gateway (admin key), starts one
agent per rollout with nothing but OPENAI_BASE_URL, OPENAI_API_KEY and FORGE_TASK, verifies
what each agent reports, and closes its rollout: process signals and finish, or abort with
the reason when the agent crashed, timed out or answered nonsense.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from forge_rl.agent_launch import AgentExit, Launcher
from forge_rl.guess_task import GuessTask, make_task, parse_answer, score_episode
from forge_rl.run_config import RunSettings


@dataclass(frozen=True)
class Episode:
    rollout_id: str
    started: float
    ended: float
    status: str
    """solved, unsolved or aborted."""
    reward: float | None
    """The task's reward (outcome + process signals); None when aborted."""
    turns: int


def answer_of(exit_: AgentExit) -> tuple[list[int | None] | None, str | None]:
    """(guesses, None), or (None, why the episode is aborted)."""
    if exit_.code != 0:
        last = exit_.stderr.strip().splitlines()[-1:] or ["no stderr"]
        return None, f"agent exited {exit_.code}: {last[0][:200]}"
    try:
        return parse_answer(exit_.last_line), None
    except ValueError as exc:
        return None, f"agent gave no answer: {exc}"


class Fleet:
    def __init__(
        self,
        gateway_url: str,
        admin_key: str,
        launcher: Launcher,
        settings: RunSettings,
        failure_log: Path,
    ) -> None:
        self.gateway_url = gateway_url
        self.admin_key = admin_key
        self.launcher = launcher
        self.settings = settings
        self.failure_log = failure_log
        self.episodes: list[Episode] = []
        self.in_flight = 0

    async def run(self, should_stop: Callable[[], bool]) -> None:
        """Keep ``agents`` episodes going, a whole group at a time, until told to stop."""
        s = self.settings
        rng = random.Random(s.seed)
        slots = asyncio.Semaphore(s.agents)
        running: set[asyncio.Task[None]] = set()
        auth = {"Authorization": f"Bearer {self.admin_key}"}
        async with httpx.AsyncClient(base_url=self.gateway_url, headers=auth, timeout=60) as http:
            try:
                while not should_stop():
                    for _ in range(s.group_size):
                        await slots.acquire()
                    if should_stop():
                        for _ in range(s.group_size):
                            slots.release()
                        break
                    task = make_task(rng, s.max_turns)
                    for rollout in await self._open_group(http, task):
                        job = asyncio.create_task(self._episode(http, task, rollout, slots))
                        running.add(job)
                        job.add_done_callback(running.discard)
                await asyncio.gather(*running)
            finally:
                for job in running:
                    job.cancel()
                await asyncio.gather(*running, return_exceptions=True)

    async def _open_group(self, http: httpx.AsyncClient, task: GuessTask) -> list[dict[str, Any]]:
        body = {"task_id": task.task_id, "group_id": f"g-{task.task_id}",
                "group_size": self.settings.group_size, "metadata": {"task": "guess"}}  # fmt: skip
        rollouts = []
        for _ in range(self.settings.group_size):
            response = await http.post("/rollouts", json=body)
            response.raise_for_status()
            rollouts.append(response.json())
        return rollouts

    async def _episode(
        self,
        http: httpx.AsyncClient,
        task: GuessTask,
        rollout: dict[str, Any],
        slots: asyncio.Semaphore,
    ) -> None:
        rid = rollout["rollout_id"]
        env = {  # the launcher adds the rest of the environment, forge's secrets left out
            "OPENAI_BASE_URL": rollout["base_url"],
            "OPENAI_API_KEY": rollout["api_key"],
            "FORGE_TASK": task.to_json(),
            "FORGE_ROLLOUT_ID": rid,
        }
        self.in_flight += 1
        started = time.time()
        try:
            exit_ = await self.launcher.run(env, self.settings.agent_timeout_s)
            guesses, problem = answer_of(exit_)
            if guesses is None:
                self._record_failure(rid, problem or "", exit_)
                await _close(http, f"/rollouts/{rid}/abort", {"reason": problem})
                self.episodes.append(Episode(rid, started, time.time(), "aborted", None, 0))
                return
            score = score_episode(task, guesses)
            signals = [{"step": step, "name": "guess", "value": v} for step, v in score.signals]
            if signals:
                await _close(http, f"/rollouts/{rid}/signals", signals)
            status = "solved" if score.solved else "unsolved"
            await _close(http, f"/rollouts/{rid}/finish",
                         {"status": status, "outcome_reward": score.outcome})  # fmt: skip
            self.episodes.append(
                Episode(rid, started, time.time(), status, score.total, len(score.signals))
            )
        finally:
            self.in_flight -= 1
            slots.release()

    def _record_failure(self, rollout_id: str, problem: str, exit_: AgentExit) -> None:
        with self.failure_log.open("a") as log:
            log.write(f"--- {rollout_id}: {problem}\n{exit_.stderr[-4000:]}\n")


async def _close(http: httpx.AsyncClient, path: str, body: Any) -> None:
    """POST a lifecycle call; 409 means the gateway already closed the rollout (its timeout)."""
    response = await http.post(path, json=body)
    if response.status_code != 409:
        response.raise_for_status()
