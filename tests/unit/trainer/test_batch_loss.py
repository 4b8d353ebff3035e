"""One batch through the tiny model: the KL filter, the diagnostics and the time split."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from infra.tiny_model import build_model
from tests.builders import train_sample
from tests.reference_logprobs import naive_logprobs
from trainer.batch_loss import accumulate_batch_gradients
from trainer.diagnostics import k3_kl, ratio_stats
from trainer.losses import LossInputs, select_loss
from trainer.sequences import call_sequences
from trainer.timing import Stopwatch

VOCAB = 300
CISPO = select_loss("cispo", eps_high=0.2, tis_cap=2.0, icepop_low=0.5, icepop_high=5.0)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_model(VOCAB, seed=0, hidden=32, layers=1)


def batch():
    """Three samples; the second's recorded log-probs are near 0, far from the model's (≈ -5.7)."""
    samples = [train_sample(i, vocab=VOCAB) for i in range(3)]
    for call in samples[1].trajectory.calls:
        call.logprobs = np.full(call.logprobs.shape, -0.01, dtype=np.float32)
    for call in samples[2].trajectory.calls:
        call.policy_version = 1
    return samples


def run(model, samples, threshold=None, loss=CISPO, watch=None):
    model.zero_grad(set_to_none=True)
    stats = accumulate_batch_gradients(
        model, samples, lambda part, last: part.backward(), loss=loss, max_row_tokens=256,
        kl_filter_threshold=threshold, watch=watch,
    )  # fmt: skip
    return stats, [p.grad.detach().clone() for p in model.parameters()]


def sample_kl(model, sample) -> float:
    calls = call_sequences([sample])
    kl = [k3_kl(lp, torch.from_numpy(c.old_logprobs)) for lp, c in
          zip(naive_logprobs(model, calls), calls, strict=True)]  # fmt: skip
    return float(torch.cat(kl).mean())


def test_the_filter_drops_exactly_the_samples_over_the_threshold(model):
    samples = batch()
    kls = [sample_kl(model, s) for s in samples]
    assert kls[1] > 3.0 > 1.0 > max(kls[0], kls[2])
    filtered, grads = run(model, samples, threshold=1.0)
    kept, expected = run(model, [samples[0], samples[2]])
    assert filtered.kl_filtered_samples == 1 and kept.kl_filtered_samples == 0
    assert filtered.calls == kept.calls == 6
    assert math.isclose(filtered.loss, kept.loss, rel_tol=1e-5)
    for a, b in zip(grads, expected, strict=True):
        torch.testing.assert_close(a, b)
    assert run(model, samples, threshold=10.0)[0].kl_filtered_samples == 0


def test_the_loss_and_diagnostics_equal_the_naive_computation(model):
    samples = batch()
    icepop = select_loss("icepop", eps_high=0.2, tis_cap=2.0, icepop_low=0.5, icepop_high=5.0)
    stats, _ = run(model, samples, loss=icepop)
    calls = call_sequences(samples)
    with torch.no_grad():
        lp = torch.cat(naive_logprobs(model, calls))
    old = torch.cat([torch.from_numpy(c.old_logprobs) for c in calls])
    adv = torch.cat([torch.full((c.completion_len,), c.advantage) for c in calls])
    whole = icepop(LossInputs(lp, old, adv, torch.ones_like(lp)))
    assert math.isclose(stats.loss, whole.loss.item(), rel_tol=1e-4)
    assert math.isclose(stats.clip_fraction, whole.clip_fraction, rel_tol=1e-6)
    assert stats.clip_fraction > 0  # the second sample's ratios (≈ e^-5.7) leave the band
    naive = ratio_stats(lp, old)
    assert stats.ratios.tokens == stats.completion_tokens == 45
    for name in ("kl_mean", "kl_max", "ratio_mean", "ratio_std", "ratio_max"):
        assert math.isclose(getattr(stats.ratios, name), getattr(naive, name), rel_tol=1e-4)
    assert stats.newest_version_share == pytest.approx(1 / 3)  # sample 2's 15 tokens of 45


def test_tree_building_and_passes_are_timed(model):
    watch = Stopwatch()
    run(model, batch(), threshold=1.0, watch=watch)
    times = watch.lap()
    assert times.tree_build > 0 and times.forward_backward > 0
    assert times.optimizer == times.wait_data == times.export == times.checkpoint == 0.0
