"""A partition whose producer keeps failing asks for a new generation at once the first time,
then ever more slowly until a transaction goes through."""

from __future__ import annotations

from streams.stage.owned_partitions import RejoinBackoff


def test_the_first_failure_rejoins_at_once_and_the_next_ones_wait_twice_as_long_up_to_the_cap():
    backoff = RejoinBackoff(first_s=1.0, max_s=6.0)
    assert [backoff.next_wait_s() for _ in range(6)] == [0.0, 1.0, 2.0, 4.0, 6.0, 6.0]


def test_a_transaction_that_goes_through_starts_the_waits_over():
    backoff = RejoinBackoff(first_s=1.0, max_s=30.0)
    backoff.next_wait_s(), backoff.next_wait_s()
    backoff.committed()
    assert backoff.next_wait_s() == 0.0
