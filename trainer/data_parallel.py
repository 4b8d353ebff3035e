"""Data parallelism's pure core: which rank trains which packed row, and the few collective
operations the trainer needs, behind a protocol a test can fake.

Invariants. Every rank packs a step's samples into the same rows (packing is a deterministic
function of the samples), so the row sizes alone tell each rank its share, and no row lists are
sent. Every rank runs the same number of forward/backward passes: ZeRO-2 and ZeRO-3 reduce
gradients in every backward and ZeRO-3 gathers parameters in every forward, so a rank whose
share has fewer rows pads with passes that contribute nothing (``rank_passes``).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

T = TypeVar("T")


def assign_rows(sizes: Sequence[int], world: int) -> tuple[tuple[int, ...], ...]:
    """Row indices per rank, balanced by size (tokens): greedy longest-processing-time.

    Rows go largest first (ties: lower index first), each to the rank with the fewest tokens so
    far (ties: lower rank); each rank's rows are then listed in ascending index order. The
    largest load is at most 4/3 of the best possible (Graham, 1969).
    """
    if world < 1:
        raise ValueError(f"world must be at least 1, not {world}")
    loads = [(0, rank) for rank in range(world)]
    shares: list[list[int]] = [[] for _ in range(world)]
    for row in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        load, rank = heapq.heappop(loads)
        shares[rank].append(row)
        heapq.heappush(loads, (load + sizes[row], rank))
    return tuple(tuple(sorted(share)) for share in shares)


def rank_passes(sizes: Sequence[int], world: int, rank: int) -> list[int | None]:
    """The rows ``rank`` runs, in order, then None (a padding pass) up to the pass count that
    every rank shares: the most rows any rank was assigned."""
    shares = assign_rows(sizes, world)
    passes = max(len(share) for share in shares)
    mine: list[int | None] = list(shares[rank])
    return mine + [None] * (passes - len(mine))


def row_budget(max_row_tokens: int, longest: int, unique_tokens: int, world: int) -> int:
    """Unique tokens per row so that ``world`` ranks all get work: a 1/world share of the batch's
    unique tokens, but at least the longest sequence and at most ``max_row_tokens``.

    Smaller rows repeat a prefix shared across them, but a row's attention costs the square of
    its length, and one row can only ever keep one rank busy.
    """
    share = math.ceil(unique_tokens / world)
    return min(max_row_tokens, max(longest, share))


class Collective(Protocol):
    """What the trainer's ranks exchange: small picklable values, never tensors of the model."""

    @property
    def rank(self) -> int: ...

    @property
    def world(self) -> int: ...

    def all_gather(self, value: T) -> list[T]:
        """Every rank's ``value``, in rank order, on every rank."""
        ...

    def broadcast(self, value: T) -> T:
        """Rank 0's ``value`` on every rank (what the others pass is ignored)."""
        ...

    def barrier(self) -> None: ...


@dataclass(frozen=True)
class SingleRank:
    """The collective of a run with one rank: nothing to exchange."""

    rank: int = 0
    world: int = 1

    def all_gather(self, value: T) -> list[T]:
        return [value]

    def broadcast(self, value: T) -> T:
        return value

    def barrier(self) -> None:
        return None


SINGLE_RANK = SingleRank()
