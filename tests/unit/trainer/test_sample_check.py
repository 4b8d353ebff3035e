"""A sample the trainer cannot train is named with its reason; every other one passes."""

from __future__ import annotations

import numpy as np
import pytest

from schemas.records import TrainSample
from tests.builders import train_sample
from trainer.sample_check import check_sample
from trainer.sequences import call_sequences

VOCAB = 300  # train_sample draws ids below its vocab of 300


def check(sample: TrainSample, max_tokens: int = 4096, vocab_size: int = VOCAB) -> str | None:
    return check_sample(sample, max_tokens=max_tokens, vocab_size=vocab_size)


def longest_call(sample: TrainSample) -> int:
    return max(int(c.tokens.shape[0]) for c in call_sequences([sample]))


def test_a_valid_multi_turn_sample_passes():
    for i in range(20):
        assert check(train_sample(i, turns=4)) is None


def test_a_sample_exactly_at_the_row_budget_passes_and_one_token_over_is_rejected():
    sample = train_sample(0)
    n = longest_call(sample)
    assert check(sample, max_tokens=n) is None
    reason = check(sample, max_tokens=n - 1)
    assert reason is not None
    assert f"has {n} tokens, more than max_row_tokens={n - 1}" in reason
    assert "rollout-0" in reason and "s0-c2" in reason


def test_logprobs_not_matching_the_completion_are_rejected():
    sample = train_sample(1)
    call = sample.trajectory.calls[1]
    call.logprobs = call.logprobs[:-1]
    reason = check(sample)
    assert reason is not None
    assert "invalid trajectory" in reason and "5 completion tokens but 4 log-probs" in reason


def test_a_parent_that_does_not_resolve_is_rejected():
    sample = train_sample(2)
    sample.trajectory.calls[2].parent_call_id = "s2-missing"
    reason = check(sample)
    assert reason is not None and "s2-missing" in reason and "not an earlier call" in reason


def test_a_parent_named_after_its_child_is_rejected():
    sample = train_sample(3)
    calls = sample.trajectory.calls
    calls[0].parent_call_id, calls[0].shared_prefix_len = calls[1].call_id, 1
    assert "not an earlier call" in (check(sample) or "")


def test_a_shared_prefix_longer_than_the_parent_is_rejected():
    sample = train_sample(4)
    sample.trajectory.calls[1].shared_prefix_len = 10_000
    assert "shares 10000 tokens" in (check(sample) or "")


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_a_non_finite_advantage_is_rejected(value):
    sample = train_sample(5)
    sample.trajectory.calls[2].advantage = float(value)
    reason = check(sample)
    assert reason is not None and "s5-c2 has a non-finite advantage" in reason


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_a_non_finite_logprob_is_rejected(value):
    sample = train_sample(6)
    logprobs = sample.trajectory.calls[0].logprobs.copy()
    logprobs[3] = value
    sample.trajectory.calls[0].logprobs = logprobs
    assert "s6-c0 has a non-finite log-prob" in (check(sample) or "")


def test_token_ids_outside_the_vocabulary_are_rejected():
    sample = train_sample(7)
    assert "outside the vocabulary of 100" in (check(sample, vocab_size=100) or "")
    negative = train_sample(7)
    completion = negative.trajectory.calls[2].completion_token_ids.copy()
    completion[0] = -1
    negative.trajectory.calls[2].completion_token_ids = completion
    assert "outside the vocabulary" in (check(negative) or "")


def test_a_call_without_completion_is_not_trained_so_its_numbers_do_not_matter():
    sample = train_sample(8)
    last = sample.trajectory.calls[-1]
    last.completion_token_ids = np.empty(0, dtype=np.int32)
    last.logprobs = np.empty(0, dtype=np.float32)
    last.advantage = float("nan")
    assert check(sample) is None


def test_a_sample_without_calls_passes():
    sample = train_sample(9)
    sample.trajectory.calls = []
    assert check(sample) is None
