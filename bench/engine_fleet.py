"""Engine fleet routing: cache affinity + load vs least-loaded vs random, on 1, 2 and 3 engines.

The engines are fakes with a prefix cache, so that what is measured is the routing. A call's
cost is ``asyncio.sleep``: its prefill grows with the prompt tokens the engine has *not*
cached (``--uncached-token-us`` each) and runs one call at a time per engine (prefill is
compute-bound); then its decode (``--fixed-ms`` + ``--output-token-us`` per output token)
runs beside up to ``--slots`` others (decode is batched). The cache is a set of 16-token block
hashes, as vLLM's automatic prefix cache, least recently used blocks evicted beyond
``--cache-blocks``; a served call's prompt and completion are cached. The workload is
agent-shaped: groups of rollouts share a task prompt, each rollout takes several turns, each
turn's prompt is the last one plus the completion and an observation, which a tool takes
``--tool-ms`` (exponential) to produce; ``--agents`` rollouts run at once, a group's members
together.

Reported per engines x routing, same workload and seed:
- affinity share: of the calls whose rollout (or, for a first call, group) had been served
  before, the fraction served by an engine holding that prefix: the engine of the rollout's
  previous call, or one that had served its group;
- prefill cached: the share of prompt tokens found in the serving engine's cache;
- calls/s over the whole workload, and its speedup over one engine; p50/p95 call latency;
- spilled: calls whose engine was full and went to the least-loaded one instead.
"least-loaded" is the same fleet given no affinity keys; "random" draws an engine per call.

    python bench/engine_fleet.py [--groups 24] [--group-size 4] [--turns 6] [--agents 24]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import numpy as np
from rich.console import Console
from rich.table import Table

# bench/gateway.py would shadow the `gateway` package: keep bench/ off the import path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

from gateway.engines.chat_tokenizer import ChatTokenizer  # noqa: E402
from gateway.engines.engine import Generation, SamplingParams  # noqa: E402
from gateway.engines.engine_fleet import EngineFleet  # noqa: E402
from infra.machine import machine_line  # noqa: E402

BLOCK = 16


@dataclass(frozen=True)
class Cost:
    fixed_s: float
    per_uncached_token_s: float
    per_output_token_s: float


def block_hashes(tokens: Sequence[int]) -> list[int]:
    """Chained hashes of the full 16-token blocks: a block matches only with its whole prefix."""
    hashes, previous = [], 0
    for start in range(0, len(tokens) - BLOCK + 1, BLOCK):
        previous = hash((previous, tuple(tokens[start : start + BLOCK])))
        hashes.append(previous)
    return hashes


class PrefixCachingEngine:
    """A fake engine whose call cost grows with the prompt tokens it has not cached."""

    def __init__(self, index: int, *, slots: int, cache_blocks: int, cost: Cost) -> None:
        self.index = index
        self.tokenizer = cast(ChatTokenizer, None)
        self.policy_version = 0
        self.cost = cost
        self.cache_blocks = cache_blocks
        self._prefill = asyncio.Lock()
        self._slots = asyncio.Semaphore(slots)
        self._cache: OrderedDict[int, None] = OrderedDict()

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def load_policy(self, version: int, uri: str) -> None: ...

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> list[Generation]:
        """Reports which engine served it and how many prompt tokens it had cached in ``text``."""
        c = self.cost
        async with self._prefill:
            cached = 0
            for h in block_hashes(prompt_ids):
                if h not in self._cache:
                    break
                self._cache.move_to_end(h)
                cached += BLOCK
            await asyncio.sleep(c.per_uncached_token_s * (len(prompt_ids) - cached))
            self._store(prompt_ids)
        async with self._slots:
            await asyncio.sleep(c.fixed_s + c.per_output_token_s * params.max_tokens)
        seed = hash(tuple(prompt_ids[-BLOCK:])) % 1_000_000  # the same answer on every engine
        completion = [(seed + k) % 30_000 for k in range(params.max_tokens)]
        self._store(prompt_ids + completion)
        ids = np.asarray(completion, dtype=np.int32)
        logprobs = np.zeros(len(completion), dtype=np.float32)
        return [Generation(ids, logprobs, f"{self.index} {cached}", "length", 0)]

    def _store(self, tokens: list[int]) -> None:
        for h in block_hashes(tokens):
            self._cache[h] = None
            self._cache.move_to_end(h)
        while len(self._cache) > self.cache_blocks:
            self._cache.popitem(last=False)


class RandomRouting:
    """The baseline: every call to an engine drawn at random."""

    def __init__(self, engines: list[PrefixCachingEngine], seed: int) -> None:
        self.engines = engines
        self.rng = random.Random(seed)

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, *, affinity: Sequence[str] = ()
    ) -> list[Generation]:
        return await self.rng.choice(self.engines).generate(prompt_ids, params)


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    eligible: int = 0
    hits: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    last_engine: dict[str, int] = field(default_factory=dict)
    """Per rollout, the engine of its previous call (which holds its longest prefix)."""
    groups_on: dict[int, set[str]] = field(default_factory=dict)

    def record(self, rollout: str, group: str, prompt: int, answer: str) -> None:
        engine, cached = (int(x) for x in answer.split())
        groups = self.groups_on.setdefault(engine, set())
        if rollout in self.last_engine:
            self.eligible += 1
            self.hits += self.last_engine[rollout] == engine
        elif any(group in g for g in self.groups_on.values()):
            self.eligible += 1
            self.hits += group in groups
        self.last_engine[rollout] = engine
        groups.add(group)
        self.prompt_tokens += prompt
        self.cached_tokens += cached


@dataclass(frozen=True)
class Workload:
    groups: int
    group_size: int
    turns: int
    agents: int
    prompt_tokens: int
    observation_tokens: int
    completion_tokens: int
    tool_s: float
    seed: int


async def run_workload(
    router: EngineFleet | RandomRouting, work: Workload, use_affinity: bool
) -> tuple[Tally, float]:
    rng = np.random.default_rng(work.seed)
    tasks = {
        f"g{g}": rng.integers(0, 30_000, work.prompt_tokens).tolist() for g in range(work.groups)
    }
    queue: asyncio.Queue[tuple[int, int]] = asyncio.Queue()
    for g in range(work.groups):
        for m in range(work.group_size):
            queue.put_nowait((g, m))
    params = SamplingParams(max_tokens=work.completion_tokens)
    tally = Tally()

    async def agent() -> None:
        while not queue.empty():
            g, m = queue.get_nowait()
            rollout, group = f"g{g}r{m}", f"g{g}"
            own = np.random.default_rng((work.seed, g, m))
            prompt = list(tasks[group])
            for _turn in range(work.turns):
                keys = (rollout, group) if use_affinity else ()
                started = time.perf_counter()
                (answer,) = await router.generate(prompt, params, affinity=keys)
                tally.latencies.append(time.perf_counter() - started)
                tally.record(rollout, group, len(prompt), answer.text)
                await asyncio.sleep(own.exponential(work.tool_s))  # the agent runs a tool
                observation = own.integers(0, 30_000, work.observation_tokens).tolist()
                prompt = prompt + answer.token_ids.tolist() + observation

    started = time.perf_counter()
    await asyncio.gather(*(agent() for _ in range(work.agents)))
    return tally, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=24)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--agents", type=int, default=24, help="rollouts running at once")
    parser.add_argument("--engines", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--slots", type=int, default=8, help="calls an engine decodes at once")
    parser.add_argument("--cache-blocks", type=int, default=8192, help="16-token blocks")
    parser.add_argument("--prompt-tokens", type=int, default=1024, help="a group's task prompt")
    parser.add_argument("--observation-tokens", type=int, default=128)
    parser.add_argument("--completion-tokens", type=int, default=32)
    parser.add_argument("--tool-ms", type=float, default=20.0, help="mean tool time per turn")
    parser.add_argument("--fixed-ms", type=float, default=1.0)
    parser.add_argument("--uncached-token-us", type=float, default=20.0)
    parser.add_argument("--output-token-us", type=float, default=250.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(machine_line(), flush=True)
    cost = Cost(args.fixed_ms / 1e3, args.uncached_token_us / 1e6, args.output_token_us / 1e6)
    work = Workload(args.groups, args.group_size, args.turns, args.agents, args.prompt_tokens,
                    args.observation_tokens, args.completion_tokens, args.tool_ms / 1e3,
                    args.seed)  # fmt: skip
    console = Console(width=120)
    table = Table(
        "engines", "routing", "calls/s", "vs 1 engine", "affinity share", "prefill cached",
        "p50 ms", "p95 ms", "spilled",
        title=f"{args.groups} groups x {args.group_size} rollouts x {args.turns} turns, "
        f"{args.agents} at once, {args.slots} slots/engine",
    )  # fmt: skip
    baseline: float | None = None
    began = time.perf_counter()
    for n in args.engines:
        for routing in ("affinity", "least-loaded", "random") if n > 1 else ("any",):
            engines = [
                PrefixCachingEngine(i, slots=args.slots, cache_blocks=args.cache_blocks, cost=cost)
                for i in range(n)
            ]
            router: EngineFleet | RandomRouting
            if routing == "random":
                router = RandomRouting(engines, args.seed)
            else:
                router = EngineFleet(engines, max_inflight_per_engine=args.slots)
            tally, seconds = asyncio.run(run_workload(router, work, routing != "least-loaded"))
            rate = len(tally.latencies) / seconds
            baseline = baseline or rate
            ms = sorted(x * 1e3 for x in tally.latencies)
            spilled = str(router.router.counts.spilled) if isinstance(router, EngineFleet) else "-"
            table.add_row(
                str(n), routing, f"{rate:.0f}", f"{rate / baseline:.2f}x",
                f"{tally.hits / max(tally.eligible, 1):.1%}",
                f"{tally.cached_tokens / tally.prompt_tokens:.1%}",
                f"{statistics.median(ms):.1f}", f"{ms[int(0.95 * (len(ms) - 1))]:.1f}", spilled,
            )  # fmt: skip
    console.print(table)
    console.print(f"{time.perf_counter() - began:.1f} s in all")


if __name__ == "__main__":
    main()
