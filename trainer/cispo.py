"""The CISPO objective (MiniMax-M1), as a function of tensors and scalars only.

J = (1/Σ|o_i|) Σ_i Σ_t sg(clip(r_it, 0, 1+ε_high)) · Â_it · log π_θ(o_it | ·). Unlike PPO-clip,
a clipped token keeps its gradient: only the importance weight is bounded and detached.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class CispoOutput:
    loss: torch.Tensor
    """Scalar to minimise: -J."""
    clip_fraction: float
    """Share of tokens whose ratio exceeded 1+ε_high."""


def compute_cispo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_high: float,
    total_tokens: int | None = None,
) -> CispoOutput:
    """All tensors are per token with equal shapes; ``mask`` selects completion tokens.

    The sum is normalised by the number of completion tokens in the whole batch:
    ``total_tokens`` when the batch is processed in parts (the parts' losses then add up to
    the whole batch's), else ``mask.sum()``.
    """
    mask = mask.to(logprobs.dtype)
    ratio = torch.exp(logprobs.detach() - old_logprobs.detach())
    weight = torch.clamp(ratio, 0.0, 1.0 + eps_high)
    total = mask.sum().clamp_min(1.0) if total_tokens is None else max(total_tokens, 1)
    loss = -(weight * advantages * logprobs * mask).sum() / total
    clipped = ((ratio > 1.0 + eps_high).to(mask.dtype) * mask).sum() / total
    return CispoOutput(loss=loss, clip_fraction=float(clipped))
