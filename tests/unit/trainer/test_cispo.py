"""The CISPO objective (trainer.losses.cispo_loss) on hand-computed values."""

from __future__ import annotations

import math

import torch

from trainer.losses import LossInputs, LossOutput, cispo_loss


def compute_cispo_loss(lp, old, adv, mask, eps_high, total_tokens=None) -> LossOutput:
    """CISPO over flat per-token tensors (``mask`` selects completion tokens)."""
    return cispo_loss(LossInputs(lp, old, adv, mask), total_tokens, eps_high=eps_high)


def test_matches_hand_computed_value():
    lp = torch.tensor([-1.0, -0.5, -2.0, -0.1])
    old = torch.tensor([-1.0, -1.0, -1.5, -3.0])
    adv = torch.tensor([1.0, 1.0, -2.0, 0.5])
    mask = torch.tensor([1.0, 1.0, 1.0, 0.0])
    out = compute_cispo_loss(lp, old, adv, mask, eps_high=0.2)
    # ratios: 1, e^0.5=1.6487 -> 1.2, e^-0.5=0.6065, (masked)
    w = [1.0, 1.2, math.exp(-0.5)]
    expected = -(w[0] * 1.0 * -1.0 + w[1] * 1.0 * -0.5 + w[2] * -2.0 * -2.0) / 3
    assert math.isclose(out.loss.item(), expected, rel_tol=1e-6)
    assert math.isclose(out.clip_fraction, 1 / 3, rel_tol=1e-6)


def test_gradient_flows_only_through_current_logprobs():
    lp = torch.tensor([-1.0, -0.5, -2.0], requires_grad=True)
    old = torch.tensor([-1.0, -1.0, -1.5], requires_grad=True)
    adv = torch.tensor([1.0, 1.0, -2.0], requires_grad=True)
    out = compute_cispo_loss(lp, old, adv, torch.ones(3), eps_high=0.2)
    out.loss.backward()
    weights = torch.tensor([1.0, 1.2, math.exp(-0.5)])
    torch.testing.assert_close(lp.grad, -weights * torch.tensor([1.0, 1.0, -2.0]) / 3)
    assert old.grad is None or torch.all(old.grad == 0)


def test_clipped_tokens_keep_their_gradient():
    lp = torch.tensor([0.0], requires_grad=True)
    out = compute_cispo_loss(lp, torch.tensor([-5.0]), torch.tensor([1.0]), torch.ones(1), 0.2)
    out.loss.backward()
    assert out.clip_fraction == 1.0
    torch.testing.assert_close(lp.grad, torch.tensor([-1.2]))


def test_normalised_by_total_completion_tokens_of_the_batch():
    lp = torch.full((10,), -1.0)
    half = torch.tensor([1.0] * 5 + [0.0] * 5)
    a = compute_cispo_loss(lp, lp, torch.ones(10), half, 0.2).loss
    b = compute_cispo_loss(lp, lp, torch.ones(10), torch.ones(10), 0.2).loss
    assert math.isclose(a.item(), 1.0) and math.isclose(b.item(), 1.0)


def test_parts_normalised_by_the_batch_total_add_up_to_the_whole():
    lp = torch.tensor([-1.0, -0.5, -2.0, -0.3, -0.9])
    old = torch.tensor([-1.1, -1.0, -1.5, -0.2, -2.0])
    adv = torch.tensor([1.0, -1.0, 0.5, 2.0, -0.5])
    ones = torch.ones(5)
    whole = compute_cispo_loss(lp, old, adv, ones, 0.2)
    a = compute_cispo_loss(lp[:2], old[:2], adv[:2], ones[:2], 0.2, total_tokens=5)
    b = compute_cispo_loss(lp[2:], old[2:], adv[2:], ones[2:], 0.2, total_tokens=5)
    torch.testing.assert_close(a.loss + b.loss, whole.loss)
    assert math.isclose(a.clip_fraction + b.clip_fraction, whole.clip_fraction)
