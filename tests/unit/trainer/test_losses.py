"""Every policy-loss variant against a hand-computed example, value and gradient."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.losses import (
    LossInputs,
    cispo_loss,
    icepop_loss,
    select_loss,
    tis_loss,
)

# Log-ratios d = lp - old: 0, 0.5, -0.5 and (masked out) 2.9.
# Ratios r = e^d: 1, 1.6487, 0.6065, 18.17.
LP = [-1.0, -0.5, -2.0, -0.1]
OLD = [-1.0, -1.0, -1.5, -3.0]
ADV = [1.0, 1.0, -2.0, 0.5]
MASK = [1.0, 1.0, 1.0, 0.0]
R = [1.0, math.exp(0.5), math.exp(-0.5), math.exp(2.9)]


def inputs(lp=LP, old=OLD, adv=ADV, mask=MASK, grad=False) -> LossInputs:
    return LossInputs(
        torch.tensor(lp, requires_grad=grad),
        torch.tensor(old, requires_grad=grad),
        torch.tensor(adv, requires_grad=grad),
        torch.tensor(mask),
    )


def expected(weights: list[float]) -> tuple[float, list[float]]:
    """-(1/3) Σ m·w·A·lp and its gradient in lp, by hand: -m·w·A/3."""
    loss = -sum(w * a * lp * m for w, a, lp, m in zip(weights, ADV, LP, MASK, strict=True)) / 3
    grad = [-m * w * a / 3 for w, a, m in zip(weights, ADV, MASK, strict=True)]
    return loss, grad


def check(out, x: LossInputs, weights: list[float]) -> None:
    loss, grad = expected(weights)
    assert math.isclose(out.loss.item(), loss, rel_tol=1e-6)
    out.loss.backward()
    torch.testing.assert_close(x.logprobs.grad, torch.tensor(grad))
    for detached in (x.old_logprobs, x.advantages):
        assert detached.grad is None or torch.all(detached.grad == 0)


def test_cispo_clips_the_weight_at_one_plus_eps_high():
    x = inputs(grad=True)
    out = cispo_loss(x, eps_high=0.2)
    check(out, x, [1.0, 1.2, R[2], 1.2])
    assert math.isclose(out.clip_fraction, 1 / 3, rel_tol=1e-6)  # the masked r=18 not counted


def test_tis_truncates_the_weight_at_the_cap():
    x = inputs(grad=True)
    out = tis_loss(x, cap=1.5)
    # loss = -(1·1·-1 + 1.5·1·-0.5 + 0.6065·-2·-2) / 3 = -0.22536
    check(out, x, [1.0, 1.5, R[2], 1.5])
    assert math.isclose(out.loss.item(), -(-1 - 0.75 + 4 * math.exp(-0.5)) / 3, rel_tol=1e-6)
    assert math.isclose(out.clip_fraction, 1 / 3, rel_tol=1e-6)


def test_tis_is_cispo_with_the_cap_at_one_plus_eps_high():
    a, b = inputs(grad=True), inputs(grad=True)
    tis, cispo = tis_loss(a, cap=1.3), cispo_loss(b, eps_high=0.3)
    (tis.loss + cispo.loss).backward()
    torch.testing.assert_close(tis.loss, cispo.loss)
    torch.testing.assert_close(a.logprobs.grad, b.logprobs.grad)


def test_icepop_zeroes_tokens_outside_the_band_and_keeps_r_inside():
    x = inputs(grad=True)
    out = icepop_loss(x, low=0.7, high=1.5)
    # r = 1 kept with weight 1; r = 1.65 > 1.5 and r = 0.61 < 0.7 masked: loss = -(1·1·-1)/3
    check(out, x, [1.0, 0.0, 0.0, 0.0])
    assert math.isclose(out.loss.item(), 1 / 3, rel_tol=1e-6)
    assert math.isclose(out.clip_fraction, 2 / 3, rel_tol=1e-6)


def test_icepop_weights_tokens_inside_the_band_by_their_ratio():
    x = inputs(grad=True)
    out = icepop_loss(x, low=0.5, high=2.0)
    check(out, x, [R[0], R[1], R[2], 0.0])
    assert out.clip_fraction == 0.0


def test_icepop_masks_an_infinite_ratio_without_nan():
    x = inputs(lp=[0.0, -1.0], old=[-200.0, -1.0], adv=[1.0, 1.0], mask=[1.0, 1.0], grad=True)
    assert torch.isinf(x.ratio()[0])
    out = icepop_loss(x, low=0.5, high=5.0)
    out.loss.backward()
    assert math.isclose(out.loss.item(), 0.5)  # -(1·1·-1)/2 from the second token only
    torch.testing.assert_close(x.logprobs.grad, torch.tensor([0.0, -0.5]))
    assert out.clip_fraction == 0.5


@pytest.mark.parametrize(
    "name", ["cispo", "tis", "icepop"], ids=lambda n: f"{n} parts add up to the whole"
)
def test_parts_normalised_by_the_batch_total_add_up_to_the_whole(name):
    loss = select_loss(name, eps_high=0.2, tis_cap=1.5, icepop_low=0.7, icepop_high=1.5)
    lp = torch.tensor([-1.0, -0.5, -2.0, -0.3, -0.9])
    old = torch.tensor([-1.1, -1.0, -1.5, -0.2, -2.0])
    adv = torch.tensor([1.0, -1.0, 0.5, 2.0, -0.5])
    ones = torch.ones(5)
    whole = loss(LossInputs(lp, old, adv, ones))
    a = loss(LossInputs(lp[:2], old[:2], adv[:2], ones[:2]), 5)
    b = loss(LossInputs(lp[2:], old[2:], adv[2:], ones[2:]), 5)
    torch.testing.assert_close(a.loss + b.loss, whole.loss)
    assert math.isclose(a.clip_fraction + b.clip_fraction, whole.clip_fraction, rel_tol=1e-6)


def test_select_loss_binds_each_variants_scalars():
    x = inputs()
    kw = {"eps_high": 0.2, "tis_cap": 1.5, "icepop_low": 0.7, "icepop_high": 1.5}
    assert select_loss("cispo", **kw)(x).loss.item() == cispo_loss(x, eps_high=0.2).loss.item()
    assert select_loss("tis", **kw)(x).loss.item() == tis_loss(x, cap=1.5).loss.item()
    icepop = icepop_loss(x, low=0.7, high=1.5).loss.item()
    assert select_loss("icepop", **kw)(x).loss.item() == icepop
    with pytest.raises(ValueError, match="unknown loss"):
        select_loss("ppo", **kw)  # type: ignore[arg-type]
