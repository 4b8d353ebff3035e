"""Tree-packed log-probs and gradients equal the naive per-sequence computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infra.tiny_model import build_model
from tests.reference_logprobs import naive_logprobs
from tests.unit.trainer.test_prefix_tree import forests
from trainer.losses import LossInputs, cispo_loss
from trainer.prefix_tree import build_forest, pack_rows
from trainer.sequences import CallSequence
from trainer.tree_forward import tree_logprobs

VOCAB = 64


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_model(VOCAB, seed=0, hidden=64, layers=2)


def as_calls(sequences, prompt_lens, seed=0) -> list[CallSequence]:
    rng = np.random.default_rng(seed)
    calls = []
    for i, (tokens, prompt_len) in enumerate(zip(sequences, prompt_lens, strict=True)):
        completion = tokens.shape[0] - prompt_len
        calls.append(
            CallSequence(
                sample_id=f"s{i}",
                call_id=f"c{i}",
                tokens=tokens,
                prompt_len=prompt_len,
                old_logprobs=(-rng.exponential(2.0, completion)).astype(np.float32),
                advantage=float(rng.normal()),
                policy_version=0,
            )
        )
    return calls


def cispo_over(calls, logprobs, eps_high=0.2):
    lp = torch.cat(logprobs)
    old = torch.cat([torch.from_numpy(c.old_logprobs) for c in calls])
    adv = torch.cat([torch.full((c.completion_len,), c.advantage) for c in calls])
    return cispo_loss(LossInputs(lp, old, adv, torch.ones_like(lp)), None, eps_high=eps_high).loss


def grads(model, loss) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss.backward()
    return [p.grad.detach().clone() for p in model.parameters()]


def assert_same(model, calls, rows):
    naive = naive_logprobs(model, calls)
    tree = [None] * len(calls)
    for row in rows:
        for seq_id, lp in zip(row.sequence_ids, tree_logprobs(model, row, calls), strict=True):
            tree[seq_id] = lp
    for a, b in zip(naive, tree, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=2e-5)
    g_naive = grads(model, cispo_over(calls, naive_logprobs(model, calls)))
    fresh_tree = [None] * len(calls)
    for row in rows:
        for seq_id, lp in zip(row.sequence_ids, tree_logprobs(model, row, calls), strict=True):
            fresh_tree[seq_id] = lp
    g_tree = grads(model, cispo_over(calls, fresh_tree))
    for a, b in zip(g_naive, g_tree, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


@st.composite
def scored_forests(draw):
    sequences = [s for s in draw(forests(max_sequences=6, vocab=VOCAB)) if s.shape[0] >= 2]
    if not sequences:
        sequences = [np.array([1, 2, 3], dtype=np.int32)]
    prompt_lens = [draw(st.integers(1, s.shape[0] - 1)) for s in sequences]
    return sequences, prompt_lens


@given(scored_forests())
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_random_trees_match_naive_logprobs_and_gradients(model, case):
    sequences, prompt_lens = case
    calls = as_calls(sequences, prompt_lens)
    assert_same(model, calls, [build_forest(sequences)])


def test_agent_shaped_batch_with_rewritten_history(model):
    rng = np.random.default_rng(1)
    system = rng.integers(0, VOCAB, 20).astype(np.int32)
    sequences, prompt_lens = [], []
    for _ in range(3):  # a group of 3 rollouts sharing the system prompt
        context = np.concatenate([system, rng.integers(0, VOCAB, 5).astype(np.int32)])
        for turn in range(3):
            completion = rng.integers(0, VOCAB, 4).astype(np.int32)
            sequences.append(np.concatenate([context, completion]))
            prompt_lens.append(context.shape[0])
            if turn == 1:  # context management: drop the middle of the history
                context = np.concatenate([system, completion])
            context = np.concatenate(
                [context, completion, rng.integers(0, VOCAB, 3).astype(np.int32)]
            )
    calls = as_calls(sequences, prompt_lens, seed=2)
    forest = build_forest(sequences)
    assert forest.num_tokens < forest.naive_tokens
    assert_same(model, calls, [forest])


def test_tree_larger_than_budget_is_split_and_still_exact(model):
    rng = np.random.default_rng(3)
    shared = rng.integers(0, VOCAB, 15).astype(np.int32)
    sequences = [
        np.concatenate([shared, rng.integers(0, VOCAB, 6).astype(np.int32)]) for _ in range(5)
    ]
    rows = pack_rows(sequences, budget=40)
    assert len(rows) > 1
    assert_same(model, as_calls(sequences, [15] * 5, seed=4), rows)


def test_flex_attention_rule_matches_naive_forward():
    """The O(N) mask rule (kv <= q and q <= subtree_end[kv]) through flex_attention.

    Forward only: flex_attention's backward is GPU-only; the GPU bench runs both.
    """
    flex_model = build_model(VOCAB, seed=0, hidden=64, layers=2)
    flex_model.set_attn_implementation("flex_attention")
    rng = np.random.default_rng(5)
    shared = rng.integers(0, VOCAB, 12).astype(np.int32)
    sequences = [
        np.concatenate([shared, rng.integers(0, VOCAB, 5).astype(np.int32)]) for _ in range(4)
    ]
    calls = as_calls(sequences, [12] * 4)
    forest = build_forest(sequences)
    with torch.no_grad():
        tree = tree_logprobs(flex_model, forest, calls, use_flex=True)
        flex_model.set_attn_implementation("sdpa")
        naive = naive_logprobs(flex_model, calls)
    for a, b in zip(naive, tree, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=2e-5)
