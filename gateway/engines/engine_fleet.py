"""Several engines served as one: calls routed by cache affinity and load, failures routed around.

``EngineFleet`` implements the ``Engine`` Protocol over a list of engines (vLLM servers; in
local runs, embedded engines in the gateway process). Which engine takes a call is decided by
the pure ``gateway.engines.routing.Router``: the engine that served the call's rollout (or its
group) before while it has room, else the least-loaded one.

Affinity reaches the fleet in one of two ways. Direct callers pass ``affinity=(rollout_id,
group_id)``. The service holds an ``Engine``, whose ``generate`` has no such parameter, so it
wraps the call in ``with routing_affinity(rollout_id, group_id):`` — a context variable that
plain engines never read, so the Protocol and every engine stay as they are. The keyword wins
when both are given.

Failures (a retry is safe: nothing of a call is recorded before an engine answers it):
- ``EngineUnavailableError`` or a connection error (``OSError``) is the engine's: it is taken
  out for a backoff and the call is retried once on another engine.
- ``EngineError`` is ambiguous (a call the model cannot take, or a sick engine): the call is
  retried once elsewhere, and the first engine is taken out only if the retry succeeds. A
  call that fails on two engines is answered 502 and takes no engine out, so that one
  poisonous prompt, sent again and again, cannot empty the fleet.
- No engine can take the call: 503 with Retry-After (``EngineUnavailableError``).
Engines that say they are down (``available`` — as ``VllmEngine`` does — or ``healthy`` is
False) get no calls; neither attribute is required.

Policy versions: ``load_policy`` loads every engine at once; each engine drains or queues
around its own reload, and every ``Generation`` is the serving engine's own, tagged with that
engine's version, so calls made while engines differ are still tagged with exactly one
version — the right one. The fleet's ``policy_version`` is the *lowest* version among the
engines that can take calls (among all, if none can): every call served from now on is at
least that new, which is what ``RolloutStarted`` and ``/health`` (and ``forge-rl run
--until-policy``) mean by "the version served". An engine that is down is left out, so one
dead server cannot hold the reported version back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar

from gateway.engines.chat_tokenizer import ChatTokenizer
from gateway.engines.engine import Engine, Generation, SamplingParams
from gateway.engines.routing import Router
from gateway.errors import EngineError, EngineUnavailableError, GatewayError

log = logging.getLogger(__name__)
NO_ENGINE = "no engine can take this call now; nothing was recorded, retry later"
ENGINE_LOST = "the engine serving this call went away; nothing was recorded, retry later"

_AFFINITY: ContextVar[tuple[str, ...]] = ContextVar("engine_affinity", default=())


@contextlib.contextmanager
def routing_affinity(*keys: str) -> Iterator[None]:
    """Calls made inside go to the engine that served ``keys`` before (most specific first)."""
    token = _AFFINITY.set(keys)
    try:
        yield
    finally:
        _AFFINITY.reset(token)


def reports_up(engine: Engine) -> bool:
    """What an engine says of itself; one that says nothing is taken to be up."""
    return all(getattr(engine, name, True) is not False for name in ("available", "healthy"))


class EngineFleet:
    def __init__(
        self,
        engines: Sequence[Engine],
        *,
        max_inflight_per_engine: int,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``engines`` must serve the same model with the same tokenizer.
        ``max_inflight_per_engine``: calls an engine takes before affinity gives way to load
        (about its batch size: beyond it calls queue there)."""
        if not engines:
            raise ValueError("a fleet needs at least one engine")
        self.engines = list(engines)
        self.tokenizer: ChatTokenizer = self.engines[0].tokenizer
        self.router = Router(
            len(self.engines),
            max_inflight=max_inflight_per_engine,
            backoff_s=backoff_s,
            max_backoff_s=max_backoff_s,
        )
        self._clock = clock

    @property
    def available(self) -> bool:
        """Up while any engine of the fleet says it is."""
        return any(reports_up(engine) for engine in self.engines)

    @property
    def policy_version(self) -> int:
        """The lowest version served by an engine that can take calls (see the module doc)."""
        serving = self.router.routable(self._clock(), self._reported_up())
        return min(self.engines[i].policy_version for i in serving or range(len(self.engines)))

    async def start(self) -> None:
        for engine in self.engines:
            await engine.start()

    async def close(self) -> None:
        """Close every engine, even when one fails to; then raise the first failure."""
        results = await asyncio.gather(*(e.close() for e in self.engines), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, *, affinity: Sequence[str] = ()
    ) -> list[Generation]:
        """``params.n`` choices from one engine, retried once on another if it fails."""
        keys = tuple(affinity) or _AFFINITY.get()
        tried: list[int] = []
        suspect: int | None = None
        failure: GatewayError | None = None
        for _attempt in range(2):
            index = self.router.route(keys, self._clock(), up=self._reported_up(), exclude=tried)
            if index is None:
                break
            tried.append(index)
            try:
                generations = await self.engines[index].generate(prompt_ids, params)
            except EngineUnavailableError as exc:
                self._take_out(index, exc)
                failure = exc
                continue
            except OSError as exc:  # a lost connection the engine's adapter did not translate
                self._take_out(index, exc)
                failure = EngineUnavailableError(ENGINE_LOST)
                continue
            except EngineError as exc:
                if suspect is not None:
                    raise  # a second engine failed it too: the call's fault, not theirs
                suspect, failure = index, exc
                continue
            finally:
                self.router.release(index)
            self.router.succeed(index)
            if suspect is not None:
                self._take_out(suspect, failure)
            return generations
        raise failure or self._unavailable()

    async def load_policy(self, version: int, uri: str) -> None:
        """Every engine loads ``version``; one that cannot keeps serving (and tagging) its own
        version, and the first failure is raised once all have tried."""
        results = await asyncio.gather(
            *(e.load_policy(version, uri) for e in self.engines), return_exceptions=True
        )
        failures = [(i, r) for i, r in enumerate(results) if isinstance(r, BaseException)]
        for i, exc in failures:
            log.error("engine %d did not load policy v%d: %r", i, version, exc,
                      extra={"policy_version": version, "engine": i})  # fmt: skip
        if failures:
            raise failures[0][1]

    def _reported_up(self) -> list[bool]:
        return [reports_up(e) for e in self.engines]

    def _take_out(self, index: int, cause: BaseException | None) -> None:
        until = self.router.fail(index, self._clock())
        log.warning("engine %d failed (%r): no calls for %.1f s", index, cause,
                    until - self._clock(), extra={"engine": index})  # fmt: skip

    def _unavailable(self) -> EngineUnavailableError:
        """503; Retry-After is when the first engine out on backoff is tried again, if known."""
        now = self._clock()
        waits = [t - now for t in self.router.down_until if t > now]
        retry_after_s = max(1, math.ceil(min(waits))) if waits else None
        return EngineUnavailableError(NO_ENGINE, retry_after_s=retry_after_s)
