"""The event time an events floor is committed with: never ahead of the records below it, and
held in a few entries however many records lie above it."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from streams.event_time.floor_event_time import FloorEventTime
from tests.builders import T0


def at(seconds: float):
    return T0 + timedelta(seconds=seconds)


@given(
    st.lists(st.integers(0, 10_000), min_size=1, max_size=300),
    st.lists(st.integers(0, 320), max_size=10),
    st.integers(1, 40),
)
def test_the_event_time_below_a_floor_never_leads_and_lags_by_at_most_a_bucket(
    seconds, floors, bucket
) -> None:
    times = FloorEventTime(bucket_records=bucket)
    for offset, s in enumerate(seconds):
        times.processed(offset, at(s))
    for floor in sorted(floors):
        below = times.below(floor)
        exact = max((at(s) for s in seconds[:floor]), default=None)
        lagged = max((at(s) for s in seconds[: floor - floor % bucket]), default=None)
        if below is None:
            assert lagged is None
        else:
            assert exact is not None and below <= exact
            assert lagged is None or lagged <= below


def test_a_floor_at_the_end_gives_the_newest_event_time_and_a_seed_is_kept() -> None:
    times = FloorEventTime(bucket_records=4)
    times.seed(at(50))
    for offset in range(10):
        times.processed(offset, at(offset))
    assert times.below(5) == at(50)  # below the floor before this generation: older records
    times.processed(10, at(70))
    assert times.below(11) == at(70)


def test_records_above_the_floor_take_one_entry_a_bucket() -> None:
    times = FloorEventTime(bucket_records=256)
    for offset in range(100_000):
        times.processed(offset, at(offset))
    assert times.below(0) is None
    assert len(times._above) == -(-100_000 // 256)
