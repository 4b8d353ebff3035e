"""Scored-through claims: how far each events partition has written forge.trajectories, and
when the sequencer may rely on one (only once it has read up to the claim's offsets)."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from streams.event_time.scored_through import PENDING_KEEP, ScoredHorizon, ScoredThrough
from tests.builders import T0


def claim(partition: int, seconds: float, ends: dict[int, int], partitions: int = 2, idle=False):
    return ScoredThrough(partition, partitions, T0 + timedelta(seconds=seconds), ends, idle)


NOW = 100.0


def at(seconds: float) -> float:
    return (T0 + timedelta(seconds=seconds)).timestamp()


def test_a_claim_survives_its_encoding():
    for idle in (False, True):
        original = claim(1, 12.5, {0: 7, 1: 0, 3: 12}, partitions=4, idle=idle)
        assert ScoredThrough.decode(original.encode()) == original


@pytest.mark.parametrize(
    "raw",
    [
        b"garbage",
        b"[]",
        b'[0, 2, "2026-01-01T00:00:00", {}, false]',  # no time zone
        b'[2, 2, "2026-01-01T00:00:00+00:00", {}, false]',  # partition out of range
        b'[0, 2, "2026-01-01T00:00:00+00:00", {"x": 1}, false]',
        b'[0, 2, "2026-01-01T00:00:00+00:00", [], false]',
        b'[0, 2, "2026-01-01T00:00:00+00:00", {}]',  # no idle
        b'[0, 2, "2026-01-01T00:00:00+00:00", {}, false, null]',  # an older claim's newest
    ],
)
def test_anything_but_a_claim_is_a_value_error(raw):
    with pytest.raises(ValueError):
        ScoredThrough.decode(raw)


def test_minus_infinity_until_every_partition_has_claimed():
    """The count is known before any claim: no claim yet is not "nothing to wait for"."""
    horizon = ScoredHorizon(2)
    assert horizon.watermark() == -math.inf
    assert not horizon.all_idle(NOW, 6.0)
    horizon.read_claim(claim(0, 10.0, {0: 0, 1: 0}), NOW)
    horizon.read_to({0: 0, 1: 0})
    assert horizon.watermark() == -math.inf  # partition 1 has said nothing yet
    horizon.read_claim(claim(1, 20.0, {0: 0, 1: 0}), NOW)
    horizon.read_to({0: 0, 1: 0})
    assert horizon.watermark() == at(10.0)  # the oldest partition's claim


def test_a_claim_counts_only_once_the_trajectories_below_its_ends_are_read():
    horizon = ScoredHorizon(1)
    horizon.read_claim(claim(0, 10.0, {0: 5, 1: 3}, partitions=1), NOW)
    horizon.read_to({0: 5, 1: 2})  # partition 1 of forge.trajectories not read far enough
    assert horizon.watermark() == -math.inf
    horizon.read_to({0: 5, 1: 3})
    assert horizon.watermark() == at(10.0)


def test_the_newest_claim_relied_on_wins_and_a_lower_one_sent_later_takes_nothing_back():
    horizon = ScoredHorizon(1)
    horizon.read_claim(claim(0, 10.0, {0: 1}, partitions=1), NOW)
    horizon.read_claim(claim(0, 30.0, {0: 9}, partitions=1), NOW)
    horizon.read_to({0: 4})
    assert horizon.watermark() == at(10.0)  # the later claim waits for offset 9
    horizon.read_to({0: 9})
    assert horizon.watermark() == at(30.0)
    horizon.read_claim(claim(0, 20.0, {0: 12}, partitions=1), NOW)  # a new owner starting afresh
    horizon.read_to({0: 12})
    assert horizon.watermark() == at(30.0)


def test_claims_waiting_for_their_ends_are_bounded_keeping_the_newest():
    horizon = ScoredHorizon(1)
    for i in range(PENDING_KEEP + 10):
        horizon.read_claim(claim(0, float(i), {0: i + 1}, partitions=1), NOW)
    horizon.read_to({0: 5})  # the claims that could count first were dropped
    assert horizon.watermark() == -math.inf
    horizon.read_to({0: PENDING_KEEP + 10})
    assert horizon.watermark() == at(PENDING_KEEP + 9)


def test_the_end_of_a_log_is_applied_whole_only_when_every_owner_is_idle_and_still_claiming():
    horizon = ScoredHorizon(2)
    assert not horizon.all_idle(NOW, 6.0)
    horizon.read_claim(claim(0, 10.0, {0: 3}, idle=True), NOW)
    assert not horizon.all_idle(NOW, 6.0)  # partition 1 has said nothing
    horizon.read_claim(claim(1, 10.0, {0: 3}, idle=False), NOW)
    horizon.read_to({0: 3})
    assert not horizon.all_idle(NOW, 6.0)  # partition 1 has something on its way
    horizon.read_claim(claim(0, 10.0, {0: 5}, idle=True), NOW + 4)
    horizon.read_claim(claim(1, 10.0, {0: 5}, idle=True), NOW + 4)
    assert not horizon.all_idle(NOW + 7, 6.0)  # their trajectories below offset 5 not read yet
    horizon.read_to({0: 5})
    assert horizon.all_idle(NOW + 7, 6.0)
    assert not horizon.all_idle(NOW + 11, 6.0)  # both owners stopped claiming


def test_a_claim_naming_fewer_partitions_than_are_read_covers_nothing():
    horizon = ScoredHorizon(1)
    horizon.read_claim(claim(0, 10.0, {0: 0}, partitions=1), NOW)
    horizon.read_to({0: 5, 1: 5})
    assert horizon.watermark() == -math.inf


def test_a_zombies_idle_claim_does_not_hide_the_owners_work_on_its_way():
    horizon = ScoredHorizon(1)
    horizon.read_claim(claim(0, 10.0, {0: 1}, partitions=1, idle=False), NOW)  # the owner, busy
    horizon.read_claim(claim(0, 9.0, {0: 1}, partitions=1, idle=True), NOW + 1)  # the zombie
    horizon.read_to({0: 1})
    assert not horizon.all_idle(NOW + 2, 6.0)
    horizon.read_claim(claim(0, 12.0, {0: 1}, partitions=1, idle=True), NOW + 8)  # the owner, done
    horizon.read_to({0: 1})
    assert horizon.all_idle(NOW + 8, 6.0)


def test_a_claim_of_another_partitioning_is_refused_and_no_horizon_is_of_no_partition():
    horizon = ScoredHorizon(2)
    with pytest.raises(ValueError, match="3 partitions"):
        horizon.read_claim(claim(0, 10.0, {0: 0}, partitions=3), NOW)
    assert horizon.watermark() == -math.inf
    with pytest.raises(ValueError):
        ScoredHorizon(0)
