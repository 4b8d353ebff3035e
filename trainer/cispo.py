"""The CISPO objective (MiniMax-M1), as a function of tensors and scalars only.

J = (1/Σ|o_i|) Σ_i Σ_t sg(clip(r_it, 0, 1+ε_high)) · Â_it · log π_θ(o_it | ·). Unlike PPO-clip,
a clipped token keeps its gradient: only the importance weight is bounded and detached.

This is the flat form of ``trainer.losses.cispo_loss``, the trainer's default variant (the
other variants and their shared signature live there).
"""

from __future__ import annotations

import torch

from trainer.losses import LossInputs, LossOutput, cispo_loss

CispoOutput = LossOutput


def compute_cispo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_high: float,
    total_tokens: int | None = None,
) -> LossOutput:
    """All tensors are per token with equal shapes; ``mask`` selects completion tokens.

    The sum is normalised by the number of completion tokens in the whole batch:
    ``total_tokens`` when the batch is processed in parts (the parts' losses then add up to
    the whole batch's), else ``mask.sum()``.
    """
    inputs = LossInputs(logprobs, old_logprobs, advantages, mask)
    return cispo_loss(inputs, total_tokens, eps_high=eps_high)
