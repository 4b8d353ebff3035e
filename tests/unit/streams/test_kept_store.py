"""The tables' store leaves a kept partition's live table alone when Faust recovers."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from faust.types import TP

from streams.kept_store import KeptPartitionsStore, register

CHANGELOG = "app-rollout-index-changelog"


def record(partition: int, key: bytes, value: bytes | None) -> Any:
    message = SimpleNamespace(partition=partition, value=value)
    return SimpleNamespace(key=key, value=value, message=message)


def store_owning(actives: set[int]) -> tuple[KeptPartitionsStore, SimpleNamespace]:
    assignor = SimpleNamespace(actives=set())
    assignor.assigned_actives = lambda: {TP(CHANGELOG, p) for p in assignor.actives}
    table = SimpleNamespace(
        name="rollout-index",
        changelog_topic=SimpleNamespace(get_topic_name=lambda: CHANGELOG),
    )
    store = KeptPartitionsStore("forge-memory://", SimpleNamespace(assignor=assignor), table)
    assignor.actives = actives
    return store, assignor


def rebalance_and_recover(store: KeptPartitionsStore, generation: int, batch: list[Any]) -> None:
    async def run() -> None:
        await store.on_rebalance(set(), set(), set(), generation)
        store.apply_changelog_batch(batch, lambda k: k, lambda v: v)
        actives = {TP(CHANGELOG, p) for p in store.app.assignor.actives}
        await store.on_recovery_completed(actives, set())

    asyncio.run(run())


def test_a_kept_partition_keeps_its_live_table_and_a_gained_one_is_recovered():
    store, assignor = store_owning({0})
    rebalance_and_recover(store, 1, [record(0, b"a", b"1")])
    store.data[b"a"] = b"2"  # a live write whose changelog record was still buffered
    assignor.actives = {0, 1}
    stale = [record(0, b"a", b"1"), record(1, b"b", b"1")]
    rebalance_and_recover(store, 2, stale)
    assert store.data == {b"a": b"2", b"b": b"1"}


def test_after_a_missed_generation_every_partition_is_recovered():
    """A worker paused past its session missed the generations another worker wrote in."""
    store, _ = store_owning({0})
    rebalance_and_recover(store, 1, [record(0, b"a", b"1")])
    store.data[b"a"] = b"stale"
    rebalance_and_recover(store, 3, [record(0, b"a", b"1"), record(0, b"a", b"3")])
    assert store.data == {b"a": b"3"}


def test_a_recovery_that_did_not_complete_keeps_nothing():
    store, _ = store_owning({0})
    rebalance_and_recover(store, 1, [record(0, b"a", b"1")])
    asyncio.run(store.on_rebalance(set(), set(), set(), 2))  # interrupted: no completion
    store.data[b"a"] = b"stale"
    rebalance_and_recover(store, 3, [record(0, b"a", b"2")])
    assert store.data == {b"a": b"2"}


def test_the_worker_s_tables_use_it():
    import faust.stores

    assert faust.stores.by_url(register()) is KeptPartitionsStore
