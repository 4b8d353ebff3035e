"""Which engine serves a call: cache affinity first, load second. A pure core, no I/O.

A rollout's calls share ever longer prefixes and a group's rollouts share the task prompt, so
the engine that served a rollout (or its group) before holds that prefix in its KV cache;
sending the call there skips most of its prefill. That pays only while the engine has room:
a call queued behind a full engine waits longer than a cold engine takes to recompute.

``route`` chooses among the *routable* engines: reported up by their owner, not backing off
after a failure, not excluded for this call (an engine that just failed it).
1. Affinity: the call's keys, most specific first (rollout id, then group id), name engines
   that served them; the first of those with fewer than ``max_inflight`` calls takes it.
2. Load: otherwise the least-loaded routable engine; among equals one the keys name (its
   cache still helps), else the next in round-robin order, so that new rollouts spread out
   even under light load instead of piling onto engine 0.
3. Nothing routable: None; the caller answers 503.
Binding: the first key (the rollout) moves to the chosen engine, which now holds its longest
prefix; later keys (the group) keep their engine while it is routable, so the members of a
group keep meeting the shared prompt where its first member computed it.

Health: ``fail`` takes an engine out for a backoff that doubles with each consecutive failure
(``backoff_s`` up to ``max_backoff_s``); afterwards it is tried again, and ``succeed`` clears
its record. Invariant: ``loads[i]`` is the number of calls routed to ``i`` and not released.
The key map is bounded (least recently used keys go first): rollouts end without telling it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Sequence
from dataclasses import dataclass


@dataclass
class RouteCounts:
    """How calls were routed, for metrics and the bench."""

    kept: int = 0
    """Sent to an engine one of their keys named (it had served them before)."""
    spilled: int = 0
    """Had such an engine, but it was full or out: sent to the least loaded instead."""
    fresh: int = 0
    """None of their keys was bound yet: sent to the least loaded."""
    refused: int = 0
    """No engine was routable."""


class Router:
    def __init__(
        self,
        engines: int,
        *,
        max_inflight: int,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        max_keys: int = 65_536,
    ) -> None:
        if engines < 1 or max_inflight < 1:
            raise ValueError("a router needs at least one engine and max_inflight >= 1")
        self.max_inflight = max_inflight
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.max_keys = max_keys
        self.loads = [0] * engines
        self.down_until = [0.0] * engines
        """Monotonic time before which an engine gets no calls (0: never failed)."""
        self.strikes = [0] * engines
        """Consecutive failures; each doubles the backoff."""
        self.counts = RouteCounts()
        self._bound: OrderedDict[str, int] = OrderedDict()
        self._next = 0

    def routable(self, now: float, up: Sequence[bool] | None = None) -> list[int]:
        """Engines that may take a call at ``now`` (``up``: what each engine says of itself)."""
        return [
            i for i in range(len(self.loads)) if (up is None or up[i]) and now >= self.down_until[i]
        ]

    def bound(self, key: str) -> int | None:
        """The engine ``key`` is bound to, if any (without refreshing it)."""
        return self._bound.get(key)

    def route(
        self,
        keys: Sequence[str],
        now: float,
        *,
        up: Sequence[bool] | None = None,
        exclude: Collection[int] = (),
    ) -> int | None:
        """The engine for a call with affinity ``keys``; its load is counted until ``release``."""
        keys = list(dict.fromkeys(keys))  # a group of one is keyed by its rollout id twice
        candidates = [i for i in self.routable(now, up) if i not in exclude]
        if not candidates:
            self.counts.refused += 1
            return None
        named = [self._bound[k] for k in keys if k in self._bound]
        chosen = next(
            (i for i in named if i in candidates and self.loads[i] < self.max_inflight), None
        )
        if chosen is not None:
            self.counts.kept += 1
        else:
            chosen = self._least_loaded(candidates, named)
            if chosen in named:
                self.counts.kept += 1
            elif named:
                self.counts.spilled += 1
            else:
                self.counts.fresh += 1
        self.loads[chosen] += 1
        self._bind(keys, chosen, candidates)
        return chosen

    def release(self, engine: int) -> None:
        """A call routed to ``engine`` ended (answered, failed or cancelled)."""
        self.loads[engine] -= 1

    def fail(self, engine: int, now: float) -> float:
        """``engine`` failed a call: out until the returned time."""
        self.strikes[engine] += 1
        delay = min(self.backoff_s * 2 ** (self.strikes[engine] - 1), self.max_backoff_s)
        self.down_until[engine] = max(self.down_until[engine], now + delay)
        return self.down_until[engine]

    def succeed(self, engine: int) -> None:
        """``engine`` answered a call: its failures are forgiven."""
        self.strikes[engine] = 0

    def _least_loaded(self, candidates: list[int], named: list[int]) -> int:
        low = min(self.loads[i] for i in candidates)
        tied = [i for i in candidates if self.loads[i] == low]
        for i in named:
            if i in tied:
                return i
        n = len(self.loads)
        chosen = min(tied, key=lambda i: (i - self._next) % n)
        self._next = (chosen + 1) % n
        return chosen

    def _bind(self, keys: list[str], engine: int, routable: list[int]) -> None:
        for rank, key in enumerate(keys):
            current = self._bound.get(key)
            if rank == 0 or current is None or current not in routable:
                self._bound[key] = engine
            self._bound.move_to_end(key)
        while len(self._bound) > self.max_keys:
            self._bound.popitem(last=False)
