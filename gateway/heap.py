"""The gateway process's garbage-collector settings, applied once it has started serving."""

from __future__ import annotations

import gc

YOUNG_COLLECTION_EVERY = 10_000
"""Net container allocations between young-generation collections (CPython's default: 700)."""


def settle_heap() -> None:
    """Freeze what start-up made and collect the young generation about 14x less often.

    Why: every call holds its objects while it waits for Kafka's acknowledgement. With 64 calls
    in flight, CPython's default collects every few calls and promotes the waiting calls' objects,
    so full collections soon run through the whole start-up heap (modules, pydantic's schemas,
    the tokenizer, the rollouts read back): 16% of the gateway's CPU at 64 connections
    (docs/decisions.md, Gateway). Memory is not what it trades: objects die by reference count,
    and a served call left no reference cycles behind when counted (2,000 calls, bench's engine,
    real Kafka); any that an engine makes still go at the next young collection. The frozen
    start-up heap is never traversed again. Process-wide, so only the gateway's own entry point
    calls it, never an app built inside another process (a test run)."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, middle, old)
