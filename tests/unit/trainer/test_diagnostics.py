"""Off-policy diagnostics on hand-made tensors."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.diagnostics import (
    RatioStats,
    k3_kl,
    kl_sum,
    newest_version_share,
    ratio_stats,
    samples_over_kl,
)

LP = torch.tensor([-1.0, -0.5, -2.0, -0.1])
OLD = torch.tensor([-1.0, -1.0, -1.5, -3.0])
MASK = torch.tensor([1.0, 1.0, 1.0, 0.0])


def test_k3_is_r_minus_one_minus_log_r():
    # d = lp - old = 0, 0.5, -0.5, 2.9
    expected = [0.0, math.exp(0.5) - 1 - 0.5, math.exp(-0.5) - 1 + 0.5, math.exp(2.9) - 1 - 2.9]
    torch.testing.assert_close(k3_kl(LP, OLD), torch.tensor(expected, dtype=torch.float64))
    assert bool((k3_kl(LP, OLD) >= 0).all())


def test_k3_averaged_over_behaviour_samples_estimates_kl_behaviour_to_current():
    """Tokens drawn from μ (the behaviour policy): mean k3 → KL(μ ‖ π), not KL(π ‖ μ)."""
    mu = torch.tensor([0.7, 0.2, 0.05, 0.05], dtype=torch.float64)
    pi = torch.tensor([0.25, 0.25, 0.25, 0.25], dtype=torch.float64)
    tokens = torch.multinomial(
        mu, 400_000, replacement=True, generator=torch.Generator().manual_seed(0)
    )
    estimate = float(k3_kl(pi.log()[tokens], mu.log()[tokens]).mean())
    kl_mu_pi = float((mu * (mu / pi).log()).sum())  # 0.515
    kl_pi_mu = float((pi * (pi / mu).log()).sum())  # 0.603
    assert math.isclose(estimate, kl_mu_pi, rel_tol=0.01)
    assert not math.isclose(estimate, kl_pi_mu, rel_tol=0.1)


def test_ratio_stats_by_hand():
    stats = ratio_stats(LP, OLD, MASK)
    r = [1.0, math.exp(0.5), math.exp(-0.5)]
    k3 = [0.0, math.exp(0.5) - 1.5, math.exp(-0.5) - 0.5]
    mean = sum(r) / 3  # 1.0851
    assert stats.tokens == 3
    assert math.isclose(stats.kl_mean, sum(k3) / 3, rel_tol=1e-6)  # 0.0851
    assert math.isclose(stats.kl_max, k3[1], rel_tol=1e-6)  # the masked token's 15.3 is not
    assert math.isclose(stats.ratio_mean, mean, rel_tol=1e-6)
    assert math.isclose(
        stats.ratio_std, math.sqrt(sum((x - mean) ** 2 for x in r) / 3), rel_tol=1e-6
    )
    assert math.isclose(stats.ratio_max, math.exp(0.5), rel_tol=1e-6)


def test_no_tokens_give_zeros():
    stats = ratio_stats(LP, OLD, torch.zeros(4))
    assert stats == RatioStats()
    assert (stats.kl_mean, stats.ratio_std) == (0.0, 0.0)


def test_merged_parts_equal_the_whole():
    lp = torch.tensor([-1.0, -0.5, -2.0, -0.3, -0.9, -4.0])
    old = torch.tensor([-1.1, -1.0, -1.5, -0.2, -2.0, -1.0])
    whole = ratio_stats(lp, old)
    merged = ratio_stats(lp[:1], old[:1]).merge(ratio_stats(lp[1:4], old[1:4]))
    merged = merged.merge(RatioStats()).merge(ratio_stats(lp[4:], old[4:]))
    assert merged.tokens == whole.tokens == 6
    for name in ("kl_mean", "kl_max", "ratio_mean", "ratio_std", "ratio_max"):
        assert math.isclose(getattr(merged, name), getattr(whole, name), rel_tol=1e-9), name


def test_a_huge_log_ratio_is_finite_in_float64():
    stats = ratio_stats(torch.tensor([0.0]), torch.tensor([-200.0]))
    assert math.isfinite(stats.ratio_max) and stats.ratio_max == pytest.approx(math.exp(200))


def test_nan_survives_a_merge_in_either_order():
    nan = ratio_stats(torch.tensor([math.nan]), torch.tensor([0.0]))
    ok = ratio_stats(torch.tensor([0.0]), torch.tensor([0.0]))
    assert math.isnan(nan.merge(ok).kl_max) and math.isnan(ok.merge(nan).ratio_max)


def test_samples_over_kl_uses_the_mean_over_all_calls_of_a_sample():
    per_call = [
        kl_sum("a", torch.tensor([0.0, 0.3])),  # a: (0 + 0.3 + 0.3) / 3 = 0.2
        kl_sum("b", torch.tensor([0.05])),
        kl_sum("a", torch.tensor([0.3])),
        kl_sum("c", torch.tensor([0.125, 0.125])),  # exactly at the threshold: kept
        kl_sum("d", torch.tensor([math.nan])),  # not finite: dropped
        kl_sum("e", torch.tensor([])),  # no tokens: kept
    ]
    assert samples_over_kl(per_call, 0.125) == {"a", "d"}
    assert samples_over_kl(per_call, 0.25) == {"d"}


def test_newest_version_share_is_token_weighted():
    # versions 3, 5, 5, 4 with 10, 6, 4, 20 tokens: (6 + 4) / 40
    assert newest_version_share([3, 5, 5, 4], [10, 6, 4, 20]) == 0.25
    assert newest_version_share([7], [3]) == 1.0
    assert newest_version_share([9, 2], [0, 5]) == 1.0  # a call without tokens does not count
    assert newest_version_share([], []) == 0.0
