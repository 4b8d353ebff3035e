"""Data-parallel ranks as threads of one process, exchanging values through a board: the
``trainer.data_parallel.Collective`` of a test, no process group needed."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class Board:
    """What the threads of one run exchange."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.meet = threading.Barrier(world, timeout=60)
        self.slots: list[Any] = [None] * world
        self.exchanges = [0] * world


class ThreadRanks:
    def __init__(self, board: Board, rank: int) -> None:
        self.board = board
        self.rank = rank
        self.world = board.world

    def _exchange(self, value: Any) -> list[Any]:
        self.board.slots[self.rank] = value
        self.board.exchanges[self.rank] += 1
        self.board.meet.wait()
        out = list(self.board.slots)
        self.board.meet.wait()
        return out

    def all_gather(self, value: Any) -> list[Any]:
        return self._exchange(value)

    def broadcast(self, value: Any) -> Any:
        return self._exchange(value)[0]

    def barrier(self) -> None:
        self._exchange(None)


def on_ranks(world: int, work: Callable[[ThreadRanks], Any]) -> tuple[list[Any], Board]:
    board = Board(world)
    results: list[Any] = [None] * world
    errors: list[BaseException] = []

    def run(rank: int) -> None:
        try:
            results[rank] = work(ThreadRanks(board, rank))
        except BaseException as exc:  # surfaced below, in the test's thread
            errors.append(exc)
            board.meet.abort()

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results, board
