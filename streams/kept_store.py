"""The tables' store: Faust's in-memory store, except that a recovery leaves alone the
partitions this worker kept through the rebalance.

The memory store has no persisted offset, so after every rebalance Faust reads each active
changelog partition from its start and applies it over the table — a partition the worker
kept as well. The worker's newest writes to it may still be in its producer's buffer then
(the flush before recovery stops waiting after 0.1 s without progress): the changelog
applied over the live table puts older values back, an index without its newest event or a
group list without its newest member. A partition this worker owned in the generation just
before, with that generation's recovery done, had no other writer since: its table is the
truth, so its changelog records are skipped. Anything else (a partition gained, a generation
missed — a worker paused past its session) is recovered as Faust does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import faust.stores
from faust.stores import memory
from faust.types import TP, EventT

SCHEME = "forge-memory"


class KeptPartitionsStore(memory.Store):  # type: ignore[misc]
    def __post_init__(self) -> None:
        super().__post_init__()
        self._owned: set[int] = set()
        """Active partitions of the last generation whose recovery completed."""
        self._owned_generation: int | None = None
        self._generation: int | None = None
        self._kept: set[int] = set()

    def _partitions(self, tps: Iterable[TP]) -> set[int]:
        topic = self.table.changelog_topic.get_topic_name()
        return {tp.partition for tp in tps if tp.topic == topic}

    async def on_rebalance(
        self, assigned: set[TP], revoked: set[TP], newly_assigned: set[TP], generation_id: int = 0
    ) -> None:
        await super().on_rebalance(assigned, revoked, newly_assigned, generation_id)
        self._generation = generation_id
        follows = self._owned_generation is not None and generation_id == self._owned_generation + 1
        actives = self._partitions(self.app.assignor.assigned_actives())
        self._kept = self._owned & actives if follows else set()

    def apply_changelog_batch(
        self, batch: Iterable[EventT], to_key: Callable[[Any], Any], to_value: Callable[[Any], Any]
    ) -> None:
        kept = self._kept
        if kept:
            batch = [event for event in batch if event.message.partition not in kept]
        super().apply_changelog_batch(batch, to_key, to_value)

    async def on_recovery_completed(self, active_tps: set[TP], standby_tps: set[TP]) -> None:
        await super().on_recovery_completed(active_tps, standby_tps)
        self._owned = self._partitions(active_tps)
        self._owned_generation = self._generation
        self._kept = set()


def register() -> str:
    """The store URL the worker's tables use."""
    faust.stores.STORES.aliases[SCHEME] = f"{__name__}:KeptPartitionsStore"
    return f"{SCHEME}://"
