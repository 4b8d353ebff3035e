"""Constrained decoding for the embedded engine, through xgrammar (I/O: none; compiles
grammars in memory).

A call's structural tag (``gateway.call.constraints``) is compiled once per distinct tag for
this tokenizer and vocabulary; each constrained row of a batch keeps its own matcher, which
masks the next token's logits before sampling and takes the sampled token after. The mask
shapes what is *sampled*; the log-probs the engine records are still the unmasked policy's (as
vLLM's ``raw_logprobs``), so both engines record the same quantity.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import torch

from gateway.engines.chat_tokenizer import ChatTokenizer

COMPILED_KEPT = 64
"""Distinct tags kept compiled: an agent repeats its tools and schemas call after call."""


class GrammarMasks:
    """xgrammar matchers over one tokenizer and the model's vocabulary size."""

    def __init__(self, tokenizer: ChatTokenizer, vocab_size: int) -> None:
        import xgrammar as xgr
        from transformers import PreTrainedTokenizerFast

        self._xgr = xgr
        fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer.backend)
        info = xgr.TokenizerInfo.from_huggingface(
            fast, vocab_size=vocab_size, stop_token_ids=sorted(tokenizer.eos_token_ids)
        )
        self.vocab_size = vocab_size
        self._compiler = xgr.GrammarCompiler(info)
        self._compiled = lru_cache(maxsize=COMPILED_KEPT)(self._compiler.compile_structural_tag)

    def matcher(self, structural_tag: str) -> Any:
        """A fresh matcher of ``structural_tag``; ValueError if it does not compile."""
        try:
            return self._xgr.GrammarMatcher(self._compiled(structural_tag))
        except RuntimeError as exc:
            raise ValueError(f"constraint does not compile: {exc}") from exc

    def masked(self, logits: torch.Tensor, matcher: Any) -> torch.Tensor:
        """``logits`` of one row with every token ``matcher`` refuses at -inf (a copy)."""
        bitmask = self._xgr.allocate_token_bitmask(1, self.vocab_size)
        matcher.fill_next_token_bitmask(bitmask)
        masked = logits.clone().unsqueeze(0)
        self._xgr.apply_token_bitmask_inplace(masked, bitmask)
        return masked.squeeze(0)
