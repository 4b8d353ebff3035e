"""Rows over ranks, and a batch's gradient split over ranks that add up to the one-rank one.

The ranks here are threads (``thread_ranks``): the sharded loop and its collectives run for real
without a process group (``test_data_parallel_engine`` runs them under torchrun with DeepSpeed).
"""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from infra.tiny_model import build_model
from schemas import codec
from tests.builders import train_sample
from tests.unit.trainer.thread_ranks import ThreadRanks, on_ranks
from trainer.batch_loss import accumulate_batch_gradients
from trainer.data_parallel import SINGLE_RANK, assign_rows, rank_passes, row_budget
from trainer.losses import select_loss
from trainer.sample_source import Batch
from trainer.shared_source import SharedBatches

VOCAB = 300
CISPO = select_loss("cispo", eps_high=0.2, tis_cap=2.0, icepop_low=0.5, icepop_high=5.0)


# --- which rank trains which row -------------------------------------------------------------


def test_rows_go_largest_first_to_the_least_loaded_rank():
    assert assign_rows([5, 9, 2, 7, 4], 2) == ((1, 4), (0, 2, 3))  # loads 13 and 14
    assert assign_rows([3, 3, 3], 2) == ((0, 2), (1,))  # ties: lower index, lower rank
    assert assign_rows([8], 3) == ((0,), (), ())
    assert assign_rows([], 2) == ((), ())
    with pytest.raises(ValueError, match="world"):
        assign_rows([1], 0)


@given(st.lists(st.integers(1, 5000), max_size=40), st.integers(1, 8))
def test_every_row_goes_to_one_rank_and_loads_stay_within_one_row(sizes, world):
    shares = assign_rows(sizes, world)
    assert sorted(r for share in shares for r in share) == list(range(len(sizes)))
    assert all(list(share) == sorted(share) for share in shares)
    loads = [sum(sizes[r] for r in share) for share in shares]
    largest = max(sizes, default=0)
    assert max(loads) <= min(loads) + largest
    assert max(loads) <= sum(sizes) / world + largest


def test_every_rank_runs_as_many_passes_padding_its_share():
    sizes = [100, 10, 10, 10]
    assert rank_passes(sizes, 2, 0) == [0, None, None]
    assert rank_passes(sizes, 2, 1) == [1, 2, 3]
    assert rank_passes([], 2, 1) == []
    assert rank_passes(sizes, 1, 0) == [0, 1, 2, 3]


def test_rows_shrink_so_every_rank_gets_work_but_never_below_the_longest_call():
    assert row_budget(4096, longest=300, unique_tokens=1000, world=2) == 500
    assert row_budget(4096, longest=700, unique_tokens=1000, world=2) == 700
    assert row_budget(400, longest=300, unique_tokens=1000, world=2) == 400
    assert row_budget(4096, longest=300, unique_tokens=1000, world=1) == 1000


# --- a batch's gradient over ranks --------------------------------------------------------------


@pytest.fixture(scope="module")
def model():
    return build_model(VOCAB, seed=0, hidden=32, layers=1)


def gradients(model, samples, ranks=SINGLE_RANK, threshold=None):
    """(stats, gradients, backward calls) of one rank's share of the batch."""
    model.zero_grad(set_to_none=True)
    calls = []

    def backward(part: torch.Tensor, last: bool) -> None:
        calls.append(last)
        part.backward()

    stats = accumulate_batch_gradients(
        model, samples, backward, loss=CISPO, max_row_tokens=256,
        kl_filter_threshold=threshold, ranks=ranks,
    )  # fmt: skip
    grads = [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in model.parameters()]
    return stats, grads, calls


@pytest.mark.parametrize(("world", "samples"), [(2, 6), (3, 4), (3, 1)])
def test_the_ranks_gradients_add_up_to_the_one_rank_gradient(model, world, samples):
    batch = [train_sample(i, vocab=VOCAB) for i in range(samples)]
    single, expected, _ = gradients(model, batch)
    copies = [copy.deepcopy(model) for _ in range(world)]
    results, _ = on_ranks(world, lambda ranks: gradients(copies[ranks.rank], batch, ranks))
    for n, grad in enumerate(expected):
        torch.testing.assert_close(sum(r[1][n] for r in results), grad, rtol=1e-5, atol=1e-7)
    backward_calls = [r[2] for r in results]
    assert all(calls == backward_calls[0] for calls in backward_calls)  # same passes everywhere
    assert backward_calls[0][-1] and not any(backward_calls[0][:-1])
    for stats, _, _ in results:
        assert stats.loss == pytest.approx(single.loss, rel=1e-5)
        assert stats.clip_fraction == pytest.approx(single.clip_fraction, rel=1e-6)
        assert stats.ratios.tokens == single.ratios.tokens == single.completion_tokens
        assert stats.ratios.kl_mean == pytest.approx(single.ratios.kl_mean, rel=1e-6)
        assert stats.calls == single.calls and stats.tokens == single.tokens
        assert stats.rows >= min(world, single.rows)


def test_the_kl_filter_drops_the_same_samples_on_every_rank(model):
    batch = [train_sample(i, vocab=VOCAB) for i in range(4)]
    for call in batch[1].trajectory.calls:
        call.logprobs = call.logprobs * 0 - 0.01  # far from the model's ≈ -5.7
    single, expected, _ = gradients(model, batch, threshold=1.0)
    assert single.kl_filtered_samples == 1
    copies = [copy.deepcopy(model) for _ in range(2)]
    results, _ = on_ranks(2, lambda r: gradients(copies[r.rank], batch, r, threshold=1.0))
    assert [r[0].kl_filtered_samples for r in results] == [1, 1]
    for n, grad in enumerate(expected):
        torch.testing.assert_close(results[0][1][n] + results[1][1][n], grad, rtol=1e-5, atol=1e-7)


# --- one reader for all ranks --------------------------------------------------------------------


class FakeSource:
    """Rank 0's reader: polls a few times (heartbeats go out), then has the batch."""

    def __init__(self, batches: list[Batch], polls: int) -> None:
        self.batches = batches
        self.polls = polls
        self.closed = False

    def next_batch(self, size, poll_timeout_s, idle_exit_s, on_poll=None, stopping=None) -> Batch:
        for _ in range(self.polls):
            if on_poll is not None:
                on_poll()
        return self.batches.pop(0)

    def close(self) -> None:
        self.closed = True


def test_rank_zero_reads_and_every_rank_gets_its_batches_through_heartbeats():
    batches = [Batch([train_sample(0), train_sample(1)], 7, 1), Batch([], 9, 0)]
    source = FakeSource(list(batches), polls=3)

    def read(ranks: ThreadRanks) -> list[Batch]:
        shared = SharedBatches(source if ranks.rank == 0 else None, ranks, heartbeat_s=0.0)
        got = [shared.next_batch(2, 1.0, None) for _ in batches]
        shared.close()
        return got

    results, board = on_ranks(3, read)
    assert board.exchanges == [8, 8, 8]  # 3 heartbeats + 1 batch, twice
    assert source.closed
    for got in results:
        assert [b.next_offset for b in got] == [7, 9]
        assert [b.dead_lettered for b in got] == [1, 0]
        assert [s.sample_id for s in got[0].samples] == ["rollout-0", "rollout-1"]
        assert got[1].samples == []
        for mine, theirs in zip(got[0].samples, results[0][0].samples, strict=True):
            assert codec.encode(mine) == codec.encode(theirs)


def test_only_rank_zero_reads():
    with pytest.raises(ValueError, match="only rank 0"):
        SharedBatches(None, SINGLE_RANK)
