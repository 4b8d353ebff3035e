"""vLLM's OpenAI server over HTTP as the engine, with exact token ids and log-probs.

Prompts go to ``/v1/completions`` as token ids (the gateway renders chat templates itself, so
it knows exactly what the model saw) with ``return_token_ids`` and per-token log-probs. New
weights are loaded by repointing the directory the server serves from and calling the workers'
``reload_weights`` through vLLM's ``/collective_rpc`` (server started with
VLLM_SERVER_DEV_MODE=1). Generations are drained around a reload so that each one is tagged
with the single policy version that produced it.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import numpy as np

from gateway.chat_tokenizer import ChatTokenizer
from gateway.engine import Generation, PolicyState, SamplingParams
from gateway.errors import EngineError

log = logging.getLogger(__name__)
ENGINE_FAILED = "the engine could not answer this call; nothing was recorded"


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
            )
        )
    return out


class VllmEngine:
    def __init__(
        self,
        base_url: str,
        tokenizer: ChatTokenizer,
        *,
        model_name: str,
        policy_link: Path | None,
        timeout_s: float = 600.0,
    ) -> None:
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.policy_link = policy_link
        self.client = httpx.AsyncClient(base_url=base_url, timeout=timeout_s)
        self.policy = PolicyState()
        self._inflight = 0
        self._idle = asyncio.Condition()
        self._reloading = False

    @property
    def policy_version(self) -> int:
        return self.policy.version

    async def start(self) -> None:
        """Nothing to start: the vLLM server runs on its own."""

    async def close(self) -> None:
        await self.client.aclose()

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> list[Generation]:
        async with self._idle:
            await self._idle.wait_for(lambda: not self._reloading)
            self._inflight += 1
            version = self.policy.version
        try:
            payload: dict[str, Any] = {
                "model": self.model_name,
                "prompt": prompt_ids,
                "max_tokens": params.max_tokens,
                "temperature": params.temperature,
                "top_p": params.top_p,
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
            try:
                response = await self.client.post("/v1/completions", json=payload)
            except httpx.HTTPError as exc:
                log.warning("vLLM unreachable: %r", exc)
                raise EngineError(ENGINE_FAILED) from exc
            if response.status_code != 200:
                log.warning("vLLM answered %d: %s", response.status_code, response.text[:500])
                raise EngineError(ENGINE_FAILED)
            return parse_completion(response.json(), version, params.top_logprobs)
        finally:
            async with self._idle:
                self._inflight -= 1
                self._idle.notify_all()

    async def load_policy(self, version: int, uri: str) -> None:
        if version <= self.policy.version and self.policy.uri is not None:
            return
        async with self._idle:
            self._reloading = True
            await self._idle.wait_for(lambda: self._inflight == 0)
        try:
            if self.policy_link is not None:
                _repoint(self.policy_link, Path(urlparse(uri).path))
            response = await self.client.post("/collective_rpc", json={"method": "reload_weights"})
            if response.status_code != 200:
                raise EngineError(
                    f"vLLM weight reload failed ({response.status_code}): {response.text[:500]}"
                )
            self.policy = PolicyState(version, uri, [*self.policy.history, version])
            log.info("vLLM serving policy v%d", version, extra={"policy_version": version})
        finally:
            async with self._idle:
                self._reloading = False
                self._idle.notify_all()


def _repoint(link: Path, target: Path) -> None:
    """Atomically make ``link`` point at ``target``."""
    tmp = link.with_name(link.name + ".tmp")
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp)
    os.replace(tmp, link)
