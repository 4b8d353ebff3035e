"""The event time group timeouts are judged at, on an injected local clock: live or catching
up is told from how event time advances, so a skewed producer clock changes nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest

from streams.event_clock import EventClock
from tests.builders import T0

LATENESS, IDLE, WINDOW = 5.0, 3.0, 30.0


class Local:
    """The worker's monotonic clock, moved by hand."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def live_traffic(skew_s: float, seconds: float = 40.0, every: float = 0.5):
    """An event every ``every`` s of local time, stamped by a producer ``skew_s`` off (plus
    0.1 s delivery); the clock and the event time reached."""
    local = Local()
    clock = EventClock(LATENESS, IDLE, WINDOW, now=local)
    produced = T0
    for _ in range(int(seconds / every)):
        local.t += every
        produced += timedelta(seconds=every)
        clock.saw(produced + timedelta(seconds=skew_s - 0.1))
    return clock, local


@pytest.mark.parametrize("skew_s", [-60.0, 0.0, 60.0])
def test_a_constant_skew_neither_freezes_timeouts_nor_runs_ahead(skew_s):
    clock, _ = live_traffic(skew_s)
    assert clock.newest is not None
    assert clock.horizon() == clock.newest - timedelta(seconds=LATENESS)


def test_nothing_times_out_before_the_window_was_watched_or_before_any_event():
    local = Local()
    clock = EventClock(LATENESS, IDLE, WINDOW, now=local)
    assert clock.horizon() is None
    clock, _ = live_traffic(-60.0, seconds=WINDOW - 1)
    assert clock.horizon() is None


def test_a_backlog_holds_timeouts_until_event_time_keeps_pace():
    local = Local()
    clock = EventClock(LATENESS, IDLE, WINDOW, now=local)
    ts = T0 - timedelta(hours=1)  # an hour behind, worked through at 20x
    for _ in range(int(60 / 0.05)):
        local.t += 0.05
        ts += timedelta(seconds=1.0)
        clock.saw(ts)
        assert clock.horizon() is None
    for step in range(int(2 * WINDOW / 0.5)):  # caught up: event time keeps pace
        local.t += 0.5
        ts += timedelta(seconds=0.5)
        clock.saw(ts)
        if step * 0.5 > WINDOW + 1:
            assert clock.horizon() == ts - timedelta(seconds=LATENESS)


def test_after_a_quiet_spell_the_horizon_is_the_newest_event():
    clock, local = live_traffic(-60.0, seconds=5)
    assert clock.horizon() is None  # not watched long enough
    local.t += IDLE + 0.1
    assert clock.horizon() == clock.newest


def test_an_event_older_than_the_newest_moves_nothing():
    clock, _ = live_traffic(0.0)
    newest, horizon = clock.newest, clock.horizon()
    clock.saw(T0)
    assert clock.newest == newest and clock.horizon() == horizon
