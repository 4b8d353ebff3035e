from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.prefix_tree import TokenBudgetError, build_forest, pack_rows


def arr(*tokens: int) -> np.ndarray:
    return np.array(tokens, dtype=np.int32)


@st.composite
def forests(draw, max_sequences: int = 8, vocab: int = 5):
    """Sequences that extend, branch off and rewrite one another, like agent calls."""
    sequences = [
        np.array(draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=12)), dtype=np.int32)
    ]
    for _ in range(draw(st.integers(0, max_sequences - 1))):
        base = sequences[draw(st.integers(0, len(sequences) - 1))]
        cut = draw(st.integers(0, base.shape[0]))
        tail = draw(st.lists(st.integers(0, vocab - 1), min_size=0 if cut else 1, max_size=10))
        sequences.append(np.concatenate([base[:cut], np.array(tail, dtype=np.int32)]))
    return sequences


def test_shared_prompt_is_stored_once():
    forest = build_forest([arr(1, 2, 3, 4), arr(1, 2, 3, 5), arr(1, 2, 6)])
    assert forest.num_tokens == 6
    assert forest.naive_tokens == 11
    np.testing.assert_array_equal(forest.token_ids, [1, 2, 3, 4, 5, 6])
    np.testing.assert_array_equal(forest.position_ids, [0, 1, 2, 3, 3, 2])
    np.testing.assert_array_equal(forest.parent, [-1, 0, 1, 2, 2, 1])
    np.testing.assert_array_equal(forest.subtree_end, [5, 5, 4, 3, 4, 5])


def test_visibility_is_ancestors_and_self():
    forest = build_forest([arr(1, 2, 3), arr(1, 4)])
    # pre-order: 1, 2, 3, 4 ; token 4's ancestors are {1}
    allowed = forest.allowed()
    assert allowed[3].tolist() == [True, False, False, True]
    assert allowed[2].tolist() == [True, True, True, False]


@given(forests())
@settings(max_examples=200, deadline=None)
def test_paths_reproduce_every_sequence_and_layout_is_preorder(sequences):
    forest = build_forest(sequences)
    for seq, path in zip(sequences, forest.paths, strict=True):
        np.testing.assert_array_equal(forest.token_ids[path], seq)
        np.testing.assert_array_equal(forest.position_ids[path], np.arange(seq.shape[0]))
        assert np.all(np.diff(path) > 0)
        np.testing.assert_array_equal(forest.parent[path[1:]], path[:-1])
    for node in range(forest.num_tokens):
        parent = forest.parent[node]
        assert parent < node
        if parent >= 0:
            assert forest.subtree_end[parent] >= forest.subtree_end[node]
            assert forest.position_ids[node] == forest.position_ids[parent] + 1
    # each token sees exactly its ancestor chain
    allowed = forest.allowed()
    for node in range(forest.num_tokens):
        chain, cur = set(), node
        while cur >= 0:
            chain.add(cur)
            cur = forest.parent[cur]
        assert set(np.flatnonzero(allowed[node]).tolist()) == chain


@given(forests())
@settings(max_examples=200, deadline=None)
def test_no_two_siblings_share_a_token(sequences):
    forest = build_forest(sequences)
    seen = set()
    for node in range(forest.num_tokens):
        key = (int(forest.parent[node]), int(forest.token_ids[node]))
        assert key not in seen
        seen.add(key)


@given(forests(max_sequences=10), st.integers(0, 20))
@settings(max_examples=150, deadline=None)
def test_rows_respect_the_budget_and_cover_every_sequence_once(sequences, slack):
    budget = max(s.shape[0] for s in sequences) + slack
    rows = pack_rows(sequences, budget)
    covered = sorted(i for row in rows for i in row.sequence_ids)
    assert covered == list(range(len(sequences)))
    for row in rows:
        assert row.num_tokens <= budget
        for seq_id, path in zip(row.sequence_ids, row.paths, strict=True):
            np.testing.assert_array_equal(row.token_ids[path], sequences[seq_id])


def test_a_tree_larger_than_the_budget_is_split():
    shared = np.arange(10, dtype=np.int32)
    sequences = [np.concatenate([shared, arr(100 + i, 200 + i)]) for i in range(6)]
    rows = pack_rows(sequences, budget=16)
    assert len(rows) == 2
    assert [r.num_tokens for r in rows] == [16, 16]
    assert [len(r.sequence_ids) for r in rows] == [3, 3]


def test_a_sequence_longer_than_the_budget_is_an_error():
    with pytest.raises(TokenBudgetError, match="exceeds the packing budget of 4"):
        pack_rows([arr(1, 2, 3, 4, 5)], budget=4)
