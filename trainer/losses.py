"""Policy-loss variants behind one signature: ``(LossInputs, total_tokens) -> LossOutput``.

Every variant here is a REINFORCE term with a detached per-token importance weight:

    L = -(1/T) Σ_t m_t · sg(w(r_t)) · Â_t · log π_θ(o_t | ·),   r_t = π_θ(o_t | ·) / π_old(o_t | ·)

π_old is the behaviour policy, the log-probs the gateway recorded when the token was sampled;
sg is stop-gradient, so ∂L/∂log π_θ(o_t) = -m_t · w(r_t) · Â_t / T and nothing flows through
π_old, Â or the weight. T is the batch's completion-token count (``total_tokens`` when the batch
is processed in parts, so that the parts' losses add up to the whole batch's; else Σ m_t).
The trainer takes one optimizer step per batch, so π_θ at the forward pass is the policy being
trained and PPO's inner ratio π_θ/π_θ_old is 1: r_t measures staleness and the engine/trainer
mismatch together. The variants differ only in w:

- ``cispo`` (MiniMax-M1): w = clip(r, 0, 1+ε_high). A clipped token keeps its gradient.
- ``tis``, token-level truncated importance sampling (Yao et al., 2025): w = min(r, C). In this
  one-step setting it is CISPO with 1+ε_high = C; it is kept as its own name and cap.
- ``icepop`` (Ring-1T's IcePop): w = r if low ≤ r ≤ high else 0. Tokens outside the band are
  masked out entirely (no gradient); those inside keep their importance weight.

``clip_fraction`` is the share of the T tokens whose weight the variant bounded: r > 1+ε_high
(cispo), r > C (tis), r outside [low, high] (icepop).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal, Protocol

import torch

LossName = Literal["cispo", "tis", "icepop"]


@dataclass(frozen=True)
class LossInputs:
    """Per completion token, 1-D tensors of one length."""

    logprobs: torch.Tensor
    """log π_θ(o_t | ·) of the policy being trained: the only tensor gradients flow through."""
    old_logprobs: torch.Tensor
    """log π_old(o_t | ·): the behaviour policy's, as the gateway recorded them."""
    advantages: torch.Tensor
    mask: torch.Tensor
    """1 for tokens in the loss, 0 for the rest."""

    def ratio(self) -> torch.Tensor:
        """r_t = exp(log π_θ - log π_old), detached."""
        return torch.exp(self.logprobs.detach() - self.old_logprobs.detach())


@dataclass(frozen=True)
class LossOutput:
    loss: torch.Tensor
    """Scalar to minimise: -J."""
    clip_fraction: float
    """Share of the T tokens whose importance weight the variant clipped or masked."""


class PolicyLoss(Protocol):
    def __call__(self, inputs: LossInputs, total_tokens: int | None = None) -> LossOutput: ...


def weighted_policy_loss(
    inputs: LossInputs, weight: torch.Tensor, bounded: torch.Tensor, total_tokens: int | None
) -> LossOutput:
    """-(1/T) Σ m · sg(weight) · Â · log π_θ, and the share of tokens where ``bounded``."""
    mask = inputs.mask.to(inputs.logprobs.dtype)
    total = mask.sum().clamp_min(1.0) if total_tokens is None else max(total_tokens, 1)
    terms = weight.detach() * inputs.advantages.detach() * inputs.logprobs * mask
    loss = -terms.sum() / total
    share = (bounded.to(mask.dtype) * mask).sum() / total
    return LossOutput(loss=loss, clip_fraction=float(share))


def cispo_loss(
    inputs: LossInputs, total_tokens: int | None = None, *, eps_high: float
) -> LossOutput:
    """CISPO (MiniMax-M1): w = clip(r, 0, 1+ε_high), detached, so
    J = (1/Σ|o_i|) Σ_i Σ_t sg(clip(r_it, 0, 1+ε_high)) · Â_it · log π_θ(o_it | ·). Unlike PPO-clip,
    a clipped token keeps its gradient: only the importance weight is bounded."""
    ratio = inputs.ratio()
    weight = torch.clamp(ratio, 0.0, 1.0 + eps_high)
    return weighted_policy_loss(inputs, weight, ratio > 1.0 + eps_high, total_tokens)


def tis_loss(inputs: LossInputs, total_tokens: int | None = None, *, cap: float) -> LossOutput:
    """Token-level truncated importance sampling: w = min(r, C), C = ``cap``."""
    ratio = inputs.ratio()
    return weighted_policy_loss(inputs, torch.clamp(ratio, max=cap), ratio > cap, total_tokens)


def icepop_loss(
    inputs: LossInputs, total_tokens: int | None = None, *, low: float, high: float
) -> LossOutput:
    """IcePop masking: w = r inside [``low``, ``high``], else 0 (and no gradient)."""
    ratio = inputs.ratio()
    inside = (ratio >= low) & (ratio <= high)
    weight = torch.where(inside, ratio, torch.zeros_like(ratio))  # r = inf outside: not inf·0
    return weighted_policy_loss(inputs, weight, ~inside, total_tokens)


def select_loss(
    name: LossName, *, eps_high: float, tis_cap: float, icepop_low: float, icepop_high: float
) -> PolicyLoss:
    """The variant ``name`` with its scalars bound: every variant is then called alike."""
    if name == "cispo":
        return functools.partial(cispo_loss, eps_high=eps_high)
    if name == "tis":
        return functools.partial(tis_loss, cap=tis_cap)
    if name == "icepop":
        return functools.partial(icepop_loss, low=icepop_low, high=icepop_high)
    raise ValueError(f"unknown loss {name!r}")
