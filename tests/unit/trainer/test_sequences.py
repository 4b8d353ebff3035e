from __future__ import annotations

import dataclasses
import itertools
import warnings

import numpy as np
import pytest
import torch

from schemas.codec import decode, encode
from schemas.records import TrainSample
from tests.builders import train_sample
from trainer.sequences import InvalidTrajectoryError, call_sequences


def test_delta_encoded_calls_are_rebuilt_in_full():
    sample = train_sample(0, turns=3)
    seqs = call_sequences([sample])
    assert len(seqs) == 3
    for earlier, later in itertools.pairwise(seqs):
        # each prompt extends the previous call's prompt + completion
        np.testing.assert_array_equal(later.tokens[: earlier.tokens.shape[0]], earlier.tokens)
    calls = sample.trajectory.calls
    np.testing.assert_array_equal(
        seqs[1].tokens[seqs[1].prompt_len :], calls[1].completion_token_ids
    )
    assert seqs[2].prompt_len == calls[2].shared_prefix_len + calls[2].prompt_token_ids.shape[0]


def test_missing_parent_is_a_clear_error():
    sample = train_sample(0, turns=2)
    calls = list(sample.trajectory.calls)
    calls[1] = dataclasses.replace(calls[1], parent_call_id="nope")
    bad = dataclasses.replace(
        sample, trajectory=dataclasses.replace(sample.trajectory, calls=calls)
    )
    with pytest.raises(InvalidTrajectoryError, match="names parent nope"):
        call_sequences([bad])


def test_logprob_count_must_match_completion():
    sample = train_sample(0, turns=1)
    call = dataclasses.replace(sample.trajectory.calls[0], logprobs=np.zeros(2, dtype=np.float32))
    bad = dataclasses.replace(
        sample, trajectory=dataclasses.replace(sample.trajectory, calls=[call])
    )
    with pytest.raises(InvalidTrajectoryError, match="log-probs"):
        call_sequences([bad])


def test_log_probs_of_a_decoded_sample_are_writable_so_torch_shares_them_without_a_warning():
    decoded = decode(encode(train_sample(0, turns=2)), TrainSample)
    assert not decoded.trajectory.calls[0].logprobs.flags.writeable  # a view of the record
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for seq in call_sequences([decoded]):
            assert seq.old_logprobs.flags.writeable
            torch.from_numpy(seq.old_logprobs)
