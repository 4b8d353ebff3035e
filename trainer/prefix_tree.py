"""Prefix-tree packing of token sequences: pure numpy, no torch.

Sequences that share prefixes (a group's common prompt, a rollout's growing context, branches
where context management rewrote history) become one forest laid out in pre-order. Each token
then attends exactly to its ancestors: ``kv <= q and q <= subtree_end[kv]``; its position id is
its depth. Inserting sequences in lexicographic order yields pre-order directly, because the
sequences passing through any node are contiguous in that order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from schemas.errors import ForgeError
from schemas.records import IntArray
from schemas.tokens import common_prefix


class TokenBudgetError(ForgeError):
    """A single sequence is longer than the token budget of one packed row."""


@dataclass(frozen=True)
class PackedForest:
    """One packed row: unique tokens in pre-order plus, per sequence, where its tokens sit."""

    token_ids: IntArray
    position_ids: IntArray
    parent: IntArray
    subtree_end: IntArray
    paths: tuple[IntArray, ...]
    """paths[k][j]: packed index of token j of the k-th sequence of ``sequence_ids``."""
    sequence_ids: tuple[int, ...]
    """Indices into the caller's sequence list, in the order of ``paths``."""

    @property
    def num_tokens(self) -> int:
        return int(self.token_ids.shape[0])

    @property
    def naive_tokens(self) -> int:
        return sum(int(p.shape[0]) for p in self.paths)

    def allowed(self) -> npt.NDArray[np.bool_]:
        """Dense [N, N] visibility: allowed[q, kv] iff kv is an ancestor of q or q itself."""
        idx = np.arange(self.num_tokens)
        q, kv = idx[:, None], idx[None, :]
        return (kv <= q) & (q <= self.subtree_end[None, :])


def sort_key(tokens: IntArray) -> bytes:
    """Big-endian unsigned bytes compare like the token sequence, a prefix first."""
    return np.asarray(tokens, dtype=">u4").tobytes()


def build_forest(sequences: Sequence[IntArray], ids: Sequence[int] | None = None) -> PackedForest:
    """Merge ``sequences`` into one pre-order forest."""
    ids = list(range(len(sequences))) if ids is None else list(ids)
    order = sorted(range(len(sequences)), key=lambda i: sort_key(sequences[i]))
    tokens: list[IntArray] = []
    depths: list[IntArray] = []
    parents: list[IntArray] = []
    paths: dict[int, IntArray] = {}
    size = 0
    prev: IntArray | None = None
    prev_path: IntArray = np.empty(0, dtype=np.int32)
    for i in order:
        seq = np.asarray(sequences[i], dtype=np.int32)
        shared = common_prefix(prev, seq) if prev is not None else 0
        new = seq.shape[0] - shared
        new_idx = np.arange(size, size + new, dtype=np.int32)
        path = np.concatenate([prev_path[:shared], new_idx])
        if new:
            tokens.append(seq[shared:])
            depths.append(np.arange(shared, seq.shape[0], dtype=np.int32))
            first_parent = prev_path[shared - 1] if shared else -1
            parents.append(np.concatenate([[first_parent], new_idx[:-1]]).astype(np.int32))
            size += new
        paths[i] = path
        prev, prev_path = seq, path
    subtree_end = np.arange(size, dtype=np.int32)
    for i in order:  # later sequences reach further; the last writer holds the subtree's end
        path = paths[i]
        if path.size:
            subtree_end[path] = path[-1]
    empty = np.empty(0, dtype=np.int32)
    return PackedForest(
        token_ids=np.concatenate(tokens) if tokens else empty,
        position_ids=np.concatenate(depths) if depths else empty,
        parent=np.concatenate(parents) if parents else empty,
        subtree_end=subtree_end,
        paths=tuple(paths[i] for i in range(len(sequences))),
        sequence_ids=tuple(ids),
    )


def pack_rows(sequences: Sequence[IntArray], budget: int) -> list[PackedForest]:
    """Split the forest of ``sequences`` into rows of at most ``budget`` unique tokens.

    A subtree that fits stays whole; one that does not is split at its branching point
    nearest the root, recursively. Whole subtrees are then packed into rows in order, sharing
    a prefix with their row neighbours, so a row is often a single chain (a rollout's turns),
    which runs with the plain causal mask. A prefix shared across rows is repeated in each.
    """
    order = sorted(range(len(sequences)), key=lambda i: sort_key(sequences[i]))
    seqs = [sequences[i] for i in order]
    for seq in seqs:
        if seq.shape[0] > budget:
            raise TokenBudgetError(
                f"a sequence of {seq.shape[0]} tokens exceeds the packing budget of {budget}"
            )
    lcp = [0] + [common_prefix(seqs[k - 1], seqs[k]) for k in range(1, len(seqs))]
    new_tokens = np.cumsum([0] + [int(s.shape[0]) - p for s, p in zip(seqs, lcp, strict=True)])

    def cost(a: int, b: int) -> int:
        """Unique tokens of sorted sequences a..b-1."""
        return lcp[a] + int(new_tokens[b] - new_tokens[a])

    units: list[tuple[int, int]] = []

    def split(a: int, b: int) -> None:
        if b - a == 1 or cost(a, b) <= budget:
            units.append((a, b))
            return
        root = min(lcp[a + 1 : b])
        start = a
        for k in range(a + 1, b):
            if lcp[k] == root:
                split(start, k)
                start = k
        split(start, b)

    if seqs:
        split(0, len(seqs))
    rows: list[list[int]] = []
    used = 0
    for a, b in units:
        size = cost(a, b)
        shared = lcp[a] if rows else 0
        if not rows or used + size - shared > budget:
            rows.append([])
            used, shared = 0, 0
        rows[-1].extend(range(a, b))
        used += size - shared
    return [build_forest([seqs[k] for k in row], [order[k] for k in row]) for row in rows]
