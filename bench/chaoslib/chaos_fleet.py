"""The chaos run's agents: an in-process asyncio fleet of plain HTTP clients of the gateway.

Each agent loops over groups of two rollouts: POST /rollouts (admin key) for both members,
then for each member 1-3 chat calls at its base URL, its process signals and its finish.
Like a careful client it
- waits the Retry-After of a 429 or 503 and sends the same request again (a model call
  answered 503 is in no trajectory, so the retry is a new call);
- retries a request that got no answer (connection refused or reset while the gateway is
  down, a timeout) after a second, and takes a 409 on a finish whose earlier try got no answer
  as that try having landed;
- never retries a start into the same group: a start answered 503, or unanswered, may still
  become an aborted member of its group (docs/running.md, "What a 503 means"), so the members it has
  are aborted and a new group begins.
Every status code is counted; any other non-2xx is recorded as a failure with its body.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

GROUP_SIZE = 2
REQUEST_BUDGET_S = 200.0
"""How long one request is retried before the agent gives up on its rollout."""


class _Unavailable:
    """A start answered 503 or not at all: its group is given up."""


UNAVAILABLE = _Unavailable()


@dataclass
class AgentStats:
    codes: Counter[tuple[str, int]] = field(default_factory=Counter)
    """(route, status) of every answer."""
    without_retry_after: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    """Non-2xx answers other than 429/503 (and the expected 409 below)."""
    unanswered: list[tuple[float, str]] = field(default_factory=list)
    """(wall time, "connection" or "timeout") of every request that got no answer."""
    exhausted: list[str] = field(default_factory=list)
    """Requests still refused (503/429) or unanswered when their retry budget ran out."""
    conflicts_after_unanswered: int = 0
    """A finish or abort answered 409 after an unanswered try: that try had landed."""
    refusals: list[float] = field(default_factory=list)
    """Wall time of every answer that was not a 2xx (429 and 503 included)."""
    acknowledged: dict[str, float] = field(default_factory=dict)
    """Rollout id -> wall time its finish was answered 200."""
    ok_times: list[float] = field(default_factory=list)
    started: int = 0
    groups: int = 0
    groups_given_up: int = 0
    rollouts_given_up: int = 0

    def first_ok_after(self, moment: float) -> float | None:
        return next((t for t in self.ok_times if t > moment), None)

    def troubled_between(self, start: float, end: float) -> int:
        """Requests refused or unanswered from ``start`` to ``end`` (wall time)."""
        refused = sum(start <= at <= end for at in self.refusals)
        return refused + sum(start <= at <= end for at, _ in self.unanswered)

    def count(self, low: int, high: int) -> int:
        return sum(n for (_, code), n in self.codes.items() if low <= code < high)


class Fleet:
    """``agents`` concurrent agents against the gateway at ``url``, until ``stop`` is set."""

    def __init__(self, url: str, admin_key: str, agents: int, seed: int, think_s: float) -> None:
        self.url = url
        self.admin_key = admin_key
        self.agents = agents
        self.seed = seed
        self.think_s = think_s
        """Pause before each model call and before the finish, as a tool or a test would take."""
        self.stats = AgentStats()
        self.stop = threading.Event()
        self.in_flight = 0

    def run(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        timeout = httpx.Timeout(60.0, connect=5.0)
        async with httpx.AsyncClient(base_url=self.url, timeout=timeout) as http:
            await asyncio.gather(*(self._agent(http, a) for a in range(self.agents)))

    async def _agent(self, http: httpx.AsyncClient, agent: int) -> None:
        n = 0
        while not self.stop.is_set():
            rng = random.Random(f"{self.seed}-{agent}-{n}")
            await self._group(http, f"g{self.seed}-{agent}-{n}", rng)
            n += 1

    async def _group(self, http: httpx.AsyncClient, group_id: str, rng: random.Random) -> None:
        self.stats.groups += 1
        body = {
            "task_id": f"digit-{rng.randrange(10)}",
            "group_id": group_id,
            "group_size": GROUP_SIZE,
        }
        members: list[dict[str, Any]] = []
        for _ in range(GROUP_SIZE):
            answer = await self._post(http, "start", "/rollouts", self.admin_key, body)
            if not isinstance(answer, dict):
                self.stats.groups_given_up += 1
                await asyncio.gather(*(self._abort(http, m, "group start failed") for m in members))
                return
            self.stats.started += 1
            members.append(answer)
        rngs = [random.Random(rng.random()) for _ in members]
        await asyncio.gather(
            *(self._rollout(http, m, r) for m, r in zip(members, rngs, strict=True))
        )

    async def _rollout(
        self, http: httpx.AsyncClient, member: dict[str, Any], rng: random.Random
    ) -> None:
        rid, key = member["rollout_id"], member["api_key"]
        chat = f"/rollouts/{rid}/v1/chat/completions"
        self.in_flight += 1
        try:
            history: list[dict[str, str]] = [{"role": "user", "content": "Guess a digit 0-9."}]
            calls = rng.randint(1, 3)
            for _ in range(calls):
                await asyncio.sleep(rng.uniform(0.5, 1.5) * self.think_s)
                request = {
                    "model": "forge-policy",
                    "messages": history,
                    "max_tokens": 8,
                    "seed": rng.randrange(1 << 30),
                }
                reply = await self._post(http, "chat", chat, key, request)
                if not isinstance(reply, dict):
                    return await self._abort(http, member, "no answer from the model")
                content = reply["choices"][0]["message"].get("content") or ""
                history += [
                    {"role": "assistant", "content": content},
                    {"role": "user", "content": rng.choice(["higher", "lower"])},
                ]
            signals = [
                {"step": s, "name": "valid_guess", "value": rng.choice([0.1, -0.1])}
                for s in range(calls)
            ]
            if not isinstance(
                await self._post(http, "signals", f"/rollouts/{rid}/signals", key, signals), dict
            ):
                return await self._abort(http, member, "signals refused")
            await asyncio.sleep(rng.uniform(0.5, 1.5) * self.think_s)
            outcome = {"status": "success", "outcome_reward": float(rng.random() < 0.3)}
            answer = await self._post(http, "finish", f"/rollouts/{rid}/finish", key, outcome)
            if isinstance(answer, dict):
                self.stats.acknowledged[rid] = time.time()
        finally:
            self.in_flight -= 1

    async def _abort(self, http: httpx.AsyncClient, member: dict[str, Any], reason: str) -> None:
        self.stats.rollouts_given_up += 1
        rid = member["rollout_id"]
        await self._post(
            http,
            "abort",
            f"/rollouts/{rid}/abort",
            member["api_key"],
            {"reason": reason},
        )

    async def _post(
        self,
        http: httpx.AsyncClient,
        route: str,
        path: str,
        key: str,
        body: Any,
        budget_s: float = REQUEST_BUDGET_S,
    ) -> dict[str, Any] | _Unavailable | None:
        """The answer's JSON; UNAVAILABLE for a start that cannot be retried; None when the
        request failed for good (recorded) or its retry budget ran out."""
        s = self.stats
        give_up = time.monotonic() + budget_s
        unanswered = False
        while time.monotonic() < give_up:
            try:
                response = await http.post(
                    path, json=body, headers={"Authorization": f"Bearer {key}"}
                )
            except httpx.TimeoutException:
                s.unanswered.append((time.time(), "timeout"))
                unanswered = True
            except httpx.TransportError:
                s.unanswered.append((time.time(), "connection"))
                unanswered = True
            else:
                code = response.status_code
                s.codes[(route, code)] += 1
                if response.is_success:
                    s.ok_times.append(time.time())
                    answer: dict[str, Any] = response.json()
                    return answer
                s.refusals.append(time.time())
                if code in (429, 503):
                    wait = _retry_after(response)
                    if wait is None:
                        s.without_retry_after.append(f"{route} {code}: {response.text[:200]}")
                        wait = 1.0
                    await asyncio.sleep(wait)
                    if code == 503 and route == "start":
                        return UNAVAILABLE
                    continue
                if code == 409 and unanswered and route in ("finish", "abort"):
                    s.conflicts_after_unanswered += 1
                    return None
                s.failures.append(
                    f"{time.strftime('%H:%M:%S')} {route} {path} -> {code}: {response.text[:300]}"
                )
                return None
            if route == "start":
                await asyncio.sleep(1.0)
                return UNAVAILABLE
            await asyncio.sleep(1.0)
        s.exhausted.append(
            f"{time.strftime('%H:%M:%S')} {route} {path}: no 2xx in {budget_s:.0f} s"
        )
        return None


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
