"""Gradients of one batch: prefix-tree rows, each forward+backward on its own, CISPO.

Rows are back-propagated one at a time so memory is bounded by one row, not the batch; each
row's loss is normalised by the batch's completion-token total, so the accumulated gradient
equals that of the whole batch's loss.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from schemas.records import TrainSample
from trainer.cispo import compute_cispo_loss
from trainer.prefix_tree import pack_rows
from trainer.sequences import CallSequence, call_sequences
from trainer.tree_forward import tree_logprobs

Backward = Callable[[torch.Tensor, bool], None]
"""Called with each row's loss part and whether it is the batch's last part."""


@dataclass(frozen=True)
class BatchStats:
    loss: float
    clip_fraction: float
    calls: int
    tokens: int
    """Tokens a naive per-call computation would process."""
    unique_tokens: int
    """Tokens actually packed (a prefix shared across rows counts once per row)."""
    completion_tokens: int
    rows: int

    @property
    def dedup_ratio(self) -> float:
        return self.tokens / max(self.unique_tokens, 1)


def _row_part(
    calls: Sequence[CallSequence],
    ids: Sequence[int],
    logprobs: Sequence[torch.Tensor],
    eps_high: float,
    total: int,
):
    lp = torch.cat(list(logprobs))
    old = torch.cat([torch.from_numpy(calls[i].old_logprobs) for i in ids]).to(lp.device)
    adv = torch.cat([torch.full((calls[i].completion_len,), calls[i].advantage) for i in ids])
    return compute_cispo_loss(lp, old, adv.to(lp.device), torch.ones_like(lp), eps_high, total)


def accumulate_batch_gradients(
    model: Any,
    samples: Sequence[TrainSample],
    backward: Backward,
    *,
    eps_high: float,
    max_row_tokens: int,
    use_flex: bool = False,
) -> BatchStats:
    """Forward and backward every packed row of the batch; the caller then steps."""
    calls = call_sequences(samples)
    total = sum(c.completion_len for c in calls)
    rows = pack_rows([c.tokens for c in calls], max_row_tokens) if calls else []
    loss = clip = 0.0
    for n, row in enumerate(rows):
        lps = tree_logprobs(model, row, calls, use_flex=use_flex)
        part = _row_part(calls, row.sequence_ids, lps, eps_high, total)
        backward(part.loss, n == len(rows) - 1)
        loss += float(part.loss.detach())
        clip += part.clip_fraction
    return BatchStats(
        loss=loss,
        clip_fraction=clip,
        calls=len(calls),
        tokens=sum(int(c.tokens.shape[0]) for c in calls),
        unique_tokens=sum(r.num_tokens for r in rows),
        completion_tokens=total,
        rows=len(rows),
    )
