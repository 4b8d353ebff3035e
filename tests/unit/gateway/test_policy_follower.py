"""Catching up on forge.policy loads the newest policy once, not every version it held."""

from __future__ import annotations

from datetime import UTC, datetime

from gateway.call.policy_follower import NewestPolicy
from schemas.records import PolicyUpdated


def update(version: int) -> PolicyUpdated:
    return PolicyUpdated(version, version, f"file:///policies/v{version}", datetime.now(UTC))


def test_a_restart_loads_only_the_newest_policy_then_each_newer_one():
    choice = NewestPolicy()
    loaded = [choice.offer(update(v), behind=v < 5) for v in range(6)]  # v5: the log's last
    assert [u.version for u in loaded if u is not None] == [5]
    assert choice.idle() is None
    assert choice.offer(update(6), behind=False).version == 6  # live: each one
    assert choice.offer(update(6), behind=False) is None  # re-read (a rebalance): not again
    assert choice.offer(update(4), behind=False) is None  # an older one never goes back


def test_the_held_update_is_loaded_when_nothing_more_comes():
    """The records after it were undecodable (dead-lettered, never yielded)."""
    choice = NewestPolicy()
    assert choice.offer(update(3), behind=True) is None
    assert choice.idle().version == 3
    assert choice.idle() is None


def test_a_held_update_is_loaded_at_the_last_record_even_when_that_one_is_older():
    """Records after it were re-publications of older versions, not newer ones."""
    choice = NewestPolicy()
    assert choice.offer(update(3), behind=True) is None
    assert choice.offer(update(2), behind=False).version == 3
