"""Gradients of one batch: prefix-tree rows, each forward+backward on its own, one policy loss.

Rows are back-propagated one at a time so memory is bounded by one row, not the batch; each
row's loss is normalised by the batch's completion-token total, so the accumulated gradient
equals that of the whole batch's loss.

With a KL threshold, samples whose mean per-token k3 KL(behaviour ‖ current) exceeds it are
dropped before any loss: that needs every row's log-probs before the first backward (the
normaliser counts only kept tokens), so a no-grad forward of the batch runs first and the kept
calls are packed again. Diagnostics (``trainer.diagnostics``) cover the tokens trained on.

With several data-parallel ranks (``ranks``), every rank packs the whole batch alike and runs
only its share of the rows (``trainer.data_parallel``); the normaliser stays the whole batch's,
so the ranks' gradients add up to the one-rank gradient, and the statistics are gathered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from schemas.records import TrainSample
from trainer.data_parallel import SINGLE_RANK, Collective, rank_passes, row_budget
from trainer.diagnostics import (
    KlSum,
    RatioStats,
    k3_kl,
    kl_sum,
    newest_version_share,
    ratio_stats,
    samples_over_kl,
)
from trainer.losses import LossInputs, PolicyLoss
from trainer.prefix_tree import PackedForest, pack_rows
from trainer.sequences import CallSequence, call_sequences
from trainer.timing import Stopwatch
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
    ratios: RatioStats = field(default_factory=RatioStats)
    """Importance weights and k3 KL over the completion tokens trained on."""
    newest_version_share: float = 0.0
    """Share of those tokens sampled by the newest policy version among the batch's calls."""
    kl_filtered_samples: int = 0
    """Samples dropped by the KL filter before the loss."""

    @property
    def dedup_ratio(self) -> float:
        return self.tokens / max(self.unique_tokens, 1)


def _row_inputs(
    calls: Sequence[CallSequence], ids: Sequence[int], logprobs: Sequence[torch.Tensor]
) -> LossInputs:
    lp = torch.cat(list(logprobs))
    old = torch.cat([torch.from_numpy(calls[i].old_logprobs) for i in ids]).to(lp.device)
    adv = torch.cat([torch.full((calls[i].completion_len,), calls[i].advantage) for i in ids])
    return LossInputs(lp, old, adv.to(lp.device), torch.ones_like(lp))


def _pack(calls: Sequence[CallSequence], max_row_tokens: int, world: int) -> list[PackedForest]:
    """Rows of at most ``max_row_tokens``; with several ranks, small enough for all to work."""
    if not calls:
        return []
    tokens = [c.tokens for c in calls]
    rows = pack_rows(tokens, max_row_tokens)
    if world == 1:
        return rows
    longest = max(int(t.shape[0]) for t in tokens)
    budget = row_budget(max_row_tokens, longest, sum(r.num_tokens for r in rows), world)
    return pack_rows(tokens, budget) if budget < max_row_tokens else rows


def _padding_loss(model: Any) -> torch.Tensor:
    """Zero, through every parameter: a pass that joins the ranks' collectives, adding nothing."""
    device = next(model.parameters()).device
    logits = model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=device)).logits
    return logits.sum() * 0.0


def _over_kl(
    model: Any,
    rows: Sequence[PackedForest],
    calls: Sequence[CallSequence],
    threshold: float,
    use_flex: bool,
    ranks: Collective,
) -> frozenset[str]:
    """Sample ids over the KL threshold, from a no-grad forward of every row (of this rank's
    share, the KL sums then gathered from every rank)."""
    per_call: list[KlSum] = []
    with torch.no_grad():
        for r in rank_passes([row.num_tokens for row in rows], ranks.world, ranks.rank):
            if r is None:
                _padding_loss(model)
                continue
            lps = tree_logprobs(model, rows[r], calls, use_flex=use_flex)
            for i, lp in zip(rows[r].sequence_ids, lps, strict=True):
                old = torch.from_numpy(calls[i].old_logprobs).to(lp.device)
                per_call.append(kl_sum(calls[i].sample_id, k3_kl(lp, old)))
    return samples_over_kl([c for part in ranks.all_gather(per_call) for c in part], threshold)


def accumulate_batch_gradients(
    model: Any,
    samples: Sequence[TrainSample],
    backward: Backward,
    *,
    loss: PolicyLoss,
    max_row_tokens: int,
    kl_filter_threshold: float | None = None,
    use_flex: bool = False,
    watch: Stopwatch | None = None,
    ranks: Collective = SINGLE_RANK,
) -> BatchStats:
    """Forward and backward every packed row of the batch (of this rank's share, in as many
    passes as every other rank); the caller then steps."""
    watch = Stopwatch() if watch is None else watch
    with watch.phase("tree_build"):
        calls = call_sequences(samples)
        rows = _pack(calls, max_row_tokens, ranks.world)
    dropped: frozenset[str] = frozenset()
    if kl_filter_threshold is not None and rows:
        with watch.phase("forward_backward"):
            dropped = _over_kl(model, rows, calls, kl_filter_threshold, use_flex, ranks)
        if dropped:
            with watch.phase("tree_build"):
                calls = [c for c in calls if c.sample_id not in dropped]
                rows = _pack(calls, max_row_tokens, ranks.world)
    total = sum(c.completion_len for c in calls)
    loss_sum = clip = 0.0
    ratios = RatioStats()
    passes = rank_passes([row.num_tokens for row in rows], ranks.world, ranks.rank)
    with watch.phase("forward_backward"):
        for n, r in enumerate(passes):
            last = n == len(passes) - 1
            if r is None:
                backward(_padding_loss(model), last)
                continue
            lps = tree_logprobs(model, rows[r], calls, use_flex=use_flex)
            inputs = _row_inputs(calls, rows[r].sequence_ids, lps)
            part = loss(inputs, total)
            backward(part.loss, last)
            loss_sum += float(part.loss.detach())
            clip += part.clip_fraction
            ratios = ratios.merge(ratio_stats(inputs.logprobs, inputs.old_logprobs))
    loss_sum, clip, ratios = _gather_parts(ranks, loss_sum, clip, ratios)
    return BatchStats(
        loss=loss_sum,
        clip_fraction=clip,
        calls=len(calls),
        tokens=sum(int(c.tokens.shape[0]) for c in calls),
        unique_tokens=sum(r.num_tokens for r in rows),
        completion_tokens=total,
        rows=len(rows),
        ratios=ratios,
        newest_version_share=newest_version_share(
            [c.policy_version for c in calls], [c.completion_len for c in calls]
        ),
        kl_filtered_samples=len(dropped),
    )


def _gather_parts(
    ranks: Collective, loss_sum: float, clip: float, ratios: RatioStats
) -> tuple[float, float, RatioStats]:
    """The whole batch's loss, clip fraction and ratio statistics from every rank's part."""
    parts = ranks.all_gather((loss_sum, clip, ratios))
    merged = RatioStats()
    for _, _, part in parts:
        merged = merged.merge(part)
    return sum(p[0] for p in parts), sum(p[1] for p in parts), merged
