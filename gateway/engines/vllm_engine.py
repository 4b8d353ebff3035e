"""vLLM's OpenAI server over HTTP as the engine, with exact token ids and log-probs.

Prompts go to ``/v1/completions`` as token ids (the gateway renders chat templates itself, so
it knows exactly what the model saw) with ``return_token_ids`` and per-token log-probs. New
weights are loaded by the workers' ``reload_weights`` with the policy directory as
``weights_path``, through vLLM's ``/collective_rpc`` (server started with
VLLM_SERVER_DEV_MODE=1). Generations are drained around a reload so that each one is tagged
with the single policy version that produced it.

A reload vLLM cannot carry out kills its engine for good (every later call answers 500), so:
- a policy directory is checked before vLLM is asked to load it (``policy_dir_problem``);
- a failed call or reload probes the server; a dead one puts the engine *down*: calls answer
  503 with Retry-After (``EngineUnavailableError``) and ``available`` is False until it is back;
- a server this project started (``VllmServer``) is restarted; one run by others is waited
  for. Either way the last policy that loaded (or a newer one announced meanwhile) is loaded
  again before calls are served, so no generation is tagged with a version it did not use.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

import httpx
import numpy as np

from gateway.engines.chat_tokenizer import ChatTokenizer
from gateway.engines.engine import Generation, PolicyState, SamplingParams
from gateway.engines.vllm_server import VllmServer
from gateway.errors import EngineError, EngineUnavailableError

log = logging.getLogger(__name__)
ENGINE_FAILED = "the engine could not answer this call; nothing was recorded"
ENGINE_DOWN = "the engine is restarting; nothing was recorded, retry later"
MAX_HEADER_BYTES = 100 * 1024 * 1024


def _alternatives(top: dict[str, float] | None) -> tuple[tuple[int, float], ...]:
    """vLLM's per-token top log-probs, keyed "token_id:N" (return_tokens_as_token_ids)."""
    pairs = ((int(k.rpartition(":")[2]), float(v)) for k, v in (top or {}).items())
    return tuple(sorted(pairs, key=lambda p: -p[1]))


def parse_completion(body: dict[str, Any], version: int, top_k: int = 0) -> list[Generation]:
    """Generations from a vLLM /v1/completions response (return_token_ids + logprobs)."""
    out = []
    for choice in sorted(body.get("choices", []), key=lambda c: c.get("index", 0)):
        token_ids = choice.get("token_ids")
        logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
        top = (choice.get("logprobs") or {}).get("top_logprobs")
        if token_ids is None or logprobs is None:
            raise EngineError("vLLM response lacks token_ids or logprobs (vLLM >= 0.10.2 needed)")
        if len(token_ids) != len(logprobs):
            raise EngineError(
                f"vLLM returned {len(token_ids)} token ids but {len(logprobs)} log-probs"
            )
        out.append(
            Generation(
                token_ids=np.asarray(token_ids, dtype=np.int32),
                logprobs=np.asarray(logprobs, dtype=np.float32),
                text=choice.get("text", ""),
                finish_reason=choice.get("finish_reason") or "length",
                policy_version=version,
                top_logprobs=tuple(_alternatives(t)[:top_k] for t in top)
                if top_k and top
                else None,
                matched_stop=stop if isinstance(stop := choice.get("stop_reason"), str) else None,
            )
        )
    return out


def policy_path(uri: str) -> Path:
    """The local directory a ``file://`` policy URI (as the trainer publishes it) names."""
    return Path(url2pathname(urlparse(uri).path))


def policy_dir_problem(directory: Path) -> str | None:
    """Why vLLM could not load ``directory`` as a policy (None: it can): a config.json and
    complete safetensors files, each header readable and its tensors within the file."""
    if not directory.is_dir():
        return "no such directory"
    try:
        json.loads((directory / "config.json").read_text())
    except (OSError, ValueError):
        return "config.json missing or unreadable"
    shards = sorted(directory.glob("*.safetensors"))
    if not shards:
        return "no safetensors weights"
    for shard in shards:
        try:
            with shard.open("rb") as f:
                size = int.from_bytes(f.read(8), "little")
                if not 2 <= size <= MAX_HEADER_BYTES:
                    return f"{shard.name}: bad safetensors header"
                header = json.loads(f.read(size))
            ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"]
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return f"{shard.name}: unreadable safetensors header"
        if shard.stat().st_size < 8 + size + max(ends, default=0):
            return f"{shard.name}: truncated"
    return None


class VllmEngine:
    def __init__(
        self,
        base_url: str,
        tokenizer: ChatTokenizer,
        *,
        model_name: str,
        server: VllmServer | None = None,
        base_dir: Path | None = None,
        timeout_s: float = 600.0,
        probe_timeout_s: float = 30.0,
    ) -> None:
        """``server``: the process behind ``base_url`` when this project started it (it is
        then restarted when found dead); None for a server run by others. ``base_dir``: the
        weights the server started with (policy v0), loaded again if a failed reload of v1
        left the server alive."""
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.server = server
        self.base_uri = base_dir.resolve().as_uri() if base_dir is not None else None
        self.client = httpx.AsyncClient(base_url=base_url, timeout=timeout_s)
        self.probe_timeout_s = probe_timeout_s
        self.policy = PolicyState()
        self.restarts = 0
        self._inflight = 0
        self._idle = asyncio.Condition()
        self._reloading = False
        self._down = False
        self._target: PolicyState | None = None
        """While down: the policy to load once the server is back."""
        self._recovery: asyncio.Task[None] | None = None

    @property
    def policy_version(self) -> int:
        return self.policy.version

    @property
    def available(self) -> bool:
        """False from the moment the engine was found dead until it serves again."""
        return not self._down

    async def start(self) -> None:
        """Nothing to start: the vLLM server runs on its own."""

    async def close(self) -> None:
        if self._recovery is not None:
            self._recovery.cancel()
            await asyncio.gather(self._recovery, return_exceptions=True)
        await self.client.aclose()

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> list[Generation]:
        async with self._idle:
            await self._idle.wait_for(lambda: not self._reloading)
            if self._down:
                raise EngineUnavailableError(ENGINE_DOWN)
            self._inflight += 1
            version = self.policy.version
        try:
            payload: dict[str, Any] = {
                "model": self.model_name,
                "prompt": prompt_ids,
                "max_tokens": params.max_tokens,
                "temperature": params.temperature,
                "top_p": params.top_p,
                "top_k": params.top_k if params.top_k > 0 else -1,
                "n": params.n,
                "logprobs": params.top_logprobs,
                "return_token_ids": True,
                "return_tokens_as_token_ids": True,
                "skip_special_tokens": False,
            }
            if params.seed is not None:
                payload["seed"] = params.seed
            if params.stop:
                payload["stop"] = list(params.stop)
            if params.constraint is not None:  # xgrammar, vLLM's backend, as the embedded engine
                payload["structured_outputs"] = {"structural_tag": params.constraint}
            try:
                response = await self.client.post("/v1/completions", json=payload)
            except httpx.HTTPError as exc:
                log.warning("vLLM unreachable: %r", exc)
                await self._check_alive()
                raise self._failure() from exc
            if response.status_code != 200:
                log.warning("vLLM answered %d: %s", response.status_code, response.text[:500])
                if response.status_code >= 500:
                    await self._check_alive()
                raise self._failure()
            return parse_completion(response.json(), version, params.top_logprobs)
        finally:
            async with self._idle:
                self._inflight -= 1
                self._idle.notify_all()

    async def load_policy(self, version: int, uri: str) -> None:
        """Load ``version``; a directory vLLM could not load is refused before it is asked."""
        if version <= self.policy.version and self.policy.uri is not None:
            return
        problem = policy_dir_problem(policy_path(uri))
        if problem is not None:
            raise EngineError(f"policy v{version} not loaded ({problem}): {uri}")
        if self._down:
            self._target = PolicyState(version, uri)
            log.info("vLLM is down; policy v%d is loaded once it is back", version)
            return
        async with self._idle:
            self._reloading = True
            await self._idle.wait_for(lambda: self._inflight == 0)
        try:
            if self._down:  # found dead by a call that was draining
                self._target = PolicyState(version, uri)
                return
            try:
                await self._reload(uri)
            except EngineError:
                self._go_down(f"vLLM could not load policy v{version}")
                raise
            self.policy = PolicyState(version, uri, [*self.policy.history, version])
            log.info("vLLM serving policy v%d", version, extra={"policy_version": version})
        finally:
            async with self._idle:
                self._reloading = False
                self._idle.notify_all()

    async def _reload(self, uri: str) -> None:
        """Load the weights at ``uri``, then drop the KV blocks the old weights computed: vLLM
        would reuse them for every prompt prefix it has seen (prefix caching)."""
        body = {"method": "reload_weights", "kwargs": {"weights_path": str(policy_path(uri))}}
        try:
            response = await self.client.post("/collective_rpc", json=body)
            if response.status_code == 200:
                response = await self._reset_prefix_cache()
        except httpx.HTTPError as exc:
            log.warning("vLLM weight reload failed: %r", exc)
            raise EngineError(f"vLLM weight reload from {uri} failed") from exc
        if response.status_code != 200:
            log.warning("vLLM weight reload answered %d: %s", response.status_code,
                        response.text[:500])  # fmt: skip
            raise EngineError(f"vLLM weight reload from {uri} failed ({response.status_code})")

    async def _reset_prefix_cache(self) -> httpx.Response:
        """vLLM refuses (success: false) while blocks are held; none are once drained."""
        for _ in range(50):
            response = await self.client.post("/reset_prefix_cache")
            try:
                if response.status_code != 200 or response.json()["success"]:
                    return response
            except (ValueError, KeyError, TypeError):
                return httpx.Response(502, text=f"unexpected answer: {response.text[:200]}")
            await asyncio.sleep(0.1)
        return httpx.Response(409, text="prefix cache still held after 5 s")

    def _failure(self) -> EngineError | EngineUnavailableError:
        return EngineUnavailableError(ENGINE_DOWN) if self._down else EngineError(ENGINE_FAILED)

    async def _answers(self) -> bool:
        """Whether the server generates: its /health still says 200 for seconds after its
        engine died, so the probe is a one-token completion."""
        if self.server is not None and not self.server.running:
            return False
        probe = {"model": self.model_name, "prompt": [0], "max_tokens": 1}
        try:
            response = await self.client.post(
                "/v1/completions", json=probe, timeout=self.probe_timeout_s
            )
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def _check_alive(self) -> None:
        """After a failure: a server that no longer answers /health puts the engine down."""
        if self._down or await self._answers() or self._down:
            return
        self._go_down("vLLM engine is dead")

    def _go_down(self, why: str) -> None:
        """Serve nothing until the server answers and serves the last policy loaded again."""
        if self._down:
            return
        self._down = True
        self._target = self.policy
        log.error(
            "%s; %s", why, "restarting it" if self.server else "waiting for it",
            extra={"policy_version": self.policy.version},
        )  # fmt: skip
        self._recovery = asyncio.create_task(self._recover(), name="vllm-recovery")

    async def _recover(self) -> None:
        """Bring the server back (restart ours, wait for theirs), then load the target policy."""
        delay = 1.0
        while self._down:
            try:
                restarted = False
                if not await self._answers():
                    if self.server is None:
                        raise EngineError("vLLM server not answering yet")
                    await asyncio.to_thread(self.server.restart)
                    self.restarts += 1
                    restarted = True
                target = self._target or self.policy
                # A server that just started serves the base weights; one that lived through
                # a failed reload may serve anything.
                uri = target.uri or (None if restarted else self.base_uri)
                if uri is not None:
                    problem = policy_dir_problem(policy_path(uri))
                    if problem is not None:
                        raise EngineError(f"policy v{target.version} not loadable ({problem})")
                    try:
                        await self._reload(uri)
                    except EngineError:
                        if target is not self.policy:  # new weights it cannot load: drop them
                            log.error("vLLM could not load policy v%d", target.version)
                            self._target = None
                        raise
                if target is not self.policy:
                    self.policy = PolicyState(
                        target.version, target.uri, [*self.policy.history, target.version]
                    )
                self._target = None
                self._down = False
            except (EngineError, OSError) as exc:
                log.warning("vLLM not back yet: %s; next try in %.0f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(2 * delay, 30.0)
        log.info("vLLM engine back (restarts: %d), serving policy v%d", self.restarts,
                 self.policy.version, extra={"policy_version": self.policy.version})  # fmt: skip
