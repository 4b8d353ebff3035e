"""An in-process transformers engine with asyncio micro-batching (CPU default, tiny models).

Requests arriving within ``batch_wait_ms`` of each other share one batched decode loop (left
padding, KV cache); a constrained row samples under its grammar's mask
(``gateway.engines.grammar_masks``). Log-probs are those of the raw model distribution, before
temperature and top-p — the π_old that CISPO's importance ratio needs. New policy weights are
swapped in between batches, so every generation is produced by exactly one, known policy version.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
import torch

from gateway.engines.chat_tokenizer import ChatTokenizer
from gateway.engines.engine import Generation, PolicyState, SamplingParams
from gateway.engines.grammar_masks import GrammarMasks
from gateway.errors import EngineError

log = logging.getLogger(__name__)


@dataclass
class _Pending:
    prompt_ids: list[int]
    params: SamplingParams
    future: asyncio.Future[list[Generation]] = field(repr=False)


@dataclass(frozen=True)
class _Reload:
    version: int
    uri: str
    state: dict[str, torch.Tensor] = field(repr=False)


@dataclass
class _Row:
    request: int
    choice: int
    generator: torch.Generator | None
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top: list[tuple[tuple[int, float], ...]] = field(default_factory=list)
    finish_reason: str | None = None
    text: str = ""
    matched_stop: str | None = None
    matcher: Any = None
    """Its constraint's grammar matcher (``gateway.engines.grammar_masks``), if it has one."""


def load_model(model_dir: Path) -> Any:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="sdpa").float()
    model.eval()
    return model


GREEDY_BELOW = 1e-5
"""Temperatures this small are greedy, as in vLLM: dividing by them overflows float32."""


def _sample(logits: torch.Tensor, params: SamplingParams, gen: torch.Generator | None) -> int:
    if params.temperature < GREEDY_BELOW:
        return int(torch.argmax(logits))
    if 0 < params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits / params.temperature, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        keep = torch.cumsum(sorted_probs, dim=-1) - sorted_probs < params.top_p
        keep[0] = True  # the most likely token always, however small top_p is
        probs = torch.zeros_like(probs).scatter_(0, order[keep], sorted_probs[keep])
    return int(torch.multinomial(probs, 1, generator=gen))


class EmbeddedEngine:
    def __init__(
        self, model_dir: Path, *, max_batch_size: int, batch_wait_ms: float, max_context: int
    ) -> None:
        self.model = load_model(model_dir)
        self.tokenizer = ChatTokenizer(model_dir)
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_ms / 1000
        self.max_context = max_context
        self.policy = PolicyState()
        self._queue: asyncio.Queue[_Pending | _Reload] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None
        self.eos_ids = self.tokenizer.eos_token_ids
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self._masks: GrammarMasks | None = None
        """Built at the first constrained call (xgrammar's tokenizer tables take a moment)."""

    @property
    def policy_version(self) -> int:
        return self.policy.version

    @property
    def available(self) -> bool:
        """In process: it serves whenever the gateway does."""
        return True

    async def start(self) -> None:
        self._worker = asyncio.create_task(self._run(), name="embedded-engine")

    async def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> list[Generation]:
        future: asyncio.Future[list[Generation]] = asyncio.get_running_loop().create_future()
        await self._queue.put(_Pending(prompt_ids, params, future))
        return await future

    async def load_policy(self, version: int, uri: str) -> None:
        """Queue new weights: requests queued before them still get the old policy."""
        if version <= self.policy.version and self.policy.uri is not None:
            return
        state = await asyncio.to_thread(_read_weights, Path(urlparse(uri).path))
        await self._queue.put(_Reload(version, uri, state))

    def _apply(self, reload: _Reload) -> None:
        self.model.load_state_dict(reload.state, strict=False)
        self.policy = PolicyState(
            reload.version, reload.uri, [*self.policy.history, reload.version]
        )
        log.info("serving policy v%d from %s", reload.version, reload.uri,
                 extra={"policy_version": reload.version})  # fmt: skip

    async def _run(self) -> None:
        while True:
            first = await self._queue.get()
            if isinstance(first, _Reload):
                self._apply(first)
                continue
            batch, reload = await self._gather(first)
            await self._serve(batch)
            if reload is not None:
                self._apply(reload)

    async def _serve(self, batch: list[_Pending]) -> None:
        """Answer a batch; if it fails, each request alone, so only the bad one fails."""
        try:
            results = await asyncio.to_thread(self._generate_batch, batch)
        except Exception as exc:  # one bad request must not fail its batch or kill the engine
            if len(batch) > 1:
                for item in batch:
                    await self._serve([item])
                return
            log.warning("generation failed: %r", exc)
            if not batch[0].future.done():
                batch[0].future.set_exception(EngineError("the engine could not generate this"))
            return
        for item, result in zip(batch, results, strict=True):
            if not item.future.done():
                item.future.set_result(result)

    async def _gather(self, first: _Pending) -> tuple[list[_Pending], _Reload | None]:
        """Requests arriving within the batching window, up to a reload that must come after."""
        loop = asyncio.get_running_loop()
        batch, rows = [first], first.params.n
        deadline = loop.time() + self.batch_wait_s
        while rows < self.max_batch_size:
            try:
                item = await asyncio.wait_for(self._queue.get(), max(deadline - loop.time(), 0))
            except TimeoutError:
                break
            if isinstance(item, _Reload):
                return batch, item
            batch.append(item)
            rows += item.params.n
        return batch, None

    @torch.no_grad()
    def _generate_batch(self, batch: list[_Pending]) -> list[list[Generation]]:
        version = self.policy.version
        rows = self._rows(batch)
        prompts = [batch[row.request].prompt_ids for row in rows]
        width = max(len(p) for p in prompts)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp_min(0)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        cache, logits = out.past_key_values, out.logits[:, -1]
        max_new = max(batch[row.request].params.max_tokens for row in rows)
        for _ in range(max_new):
            next_ids = self._step(batch, rows, logits)
            if all(row.finish_reason is not None for row in rows):
                break
            mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=torch.long)], dim=1)
            positions = positions[:, -1:] + 1
            out = self.model(
                input_ids=next_ids[:, None],
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
            )
            cache, logits = out.past_key_values, out.logits[:, -1]
        return self._results(batch, rows, version)

    def _rows(self, batch: list[_Pending]) -> list[_Row]:
        """One row per choice of each request, with its seeded generator and its matcher."""
        rows = []
        for r, item in enumerate(batch):
            for choice in range(item.params.n):
                gen = None
                if item.params.seed is not None:
                    gen = torch.Generator().manual_seed(item.params.seed + choice)
                matcher = None
                if item.params.constraint is not None:
                    matcher = self._grammar_masks().matcher(item.params.constraint)
                rows.append(_Row(r, choice, gen, matcher=matcher))
        return rows

    def _grammar_masks(self) -> GrammarMasks:
        if self._masks is None:
            self._masks = GrammarMasks(self.tokenizer, int(self.model.config.vocab_size))
        return self._masks

    def _step(self, batch: list[_Pending], rows: list[_Row], logits: torch.Tensor) -> torch.Tensor:
        """Each open row's next token, sampled under its mask (if any); recorded with the
        unmasked policy's log-prob."""
        logp = torch.log_softmax(logits.float(), dim=-1)
        next_ids = torch.full((len(rows),), self.pad_id, dtype=torch.long)
        for i, row in enumerate(rows):
            if row.finish_reason is not None:
                continue
            params = batch[row.request].params
            scores = logits[i].float()
            if row.matcher is not None:
                scores = self._grammar_masks().masked(scores, row.matcher)
            token = _sample(scores, params, row.generator)
            if row.matcher is not None and not row.matcher.accept_token(token):
                raise EngineError("the constrained sampler took a token its grammar refuses")
            row.tokens.append(token)
            row.logprobs.append(float(logp[i, token]))
            if params.top_logprobs:
                values, top_ids = torch.topk(logp[i], params.top_logprobs)
                row.top.append(tuple(zip(top_ids.tolist(), values.tolist(), strict=True)))
            next_ids[i] = token
            self._check_finished(row, params)
        return next_ids

    def _results(
        self, batch: list[_Pending], rows: list[_Row], version: int
    ) -> list[list[Generation]]:
        results: list[list[Generation]] = [[] for _ in batch]
        for row in rows:
            results[row.request].append(
                Generation(
                    token_ids=np.asarray(row.tokens, dtype=np.int32),
                    logprobs=np.asarray(row.logprobs, dtype=np.float32),
                    text=row.text,
                    finish_reason=row.finish_reason or "length",
                    policy_version=version,
                    top_logprobs=tuple(row.top) if batch[row.request].params.top_logprobs else None,
                    matched_stop=row.matched_stop,
                )
            )
        return results

    def _check_finished(self, row: _Row, params: SamplingParams) -> None:
        if row.tokens[-1] in self.eos_ids:
            row.text = self.tokenizer.decode(row.tokens[:-1], skip_special_tokens=False)
            row.finish_reason = "stop"
            return
        text = self.tokenizer.decode(row.tokens, skip_special_tokens=False)
        for stop in params.stop:
            at = text.find(stop)
            if at >= 0:
                row.text, row.finish_reason, row.matched_stop = text[:at], "stop", stop
                return
        row.text = text
        if len(row.tokens) >= params.max_tokens:
            row.finish_reason = "length"


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no .safetensors weights in {path}")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(f))
    return state
