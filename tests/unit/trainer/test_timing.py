"""The stopwatch charges time to phases and hands each second to exactly one lap."""

from __future__ import annotations

import pytest

from trainer.timing import StepTimes, Stopwatch, device_synchronizer


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_phases_add_up_and_a_lap_starts_again_from_zero():
    clock, synced = FakeClock(), []
    watch = Stopwatch(synchronize=lambda: synced.append(clock.now), clock=clock)
    with watch.phase("wait_data"):
        clock.now += 2.0
    clock.now += 100.0  # outside any phase: not charged
    with watch.phase("forward_backward"):
        clock.now += 0.5
    with watch.phase("forward_backward"):  # a phase may repeat (the KL filter's forward)
        clock.now += 0.25
    assert watch.lap() == StepTimes(wait_data=2.0, forward_backward=0.75)
    assert synced == [2.0, 102.5, 102.75]  # at the end of every phase
    with watch.phase("checkpoint"):
        clock.now += 3.0
    assert watch.lap() == StepTimes(checkpoint=3.0)
    assert watch.lap() == StepTimes()


def test_a_phase_that_raises_is_still_charged():
    clock = FakeClock()
    watch = Stopwatch(clock=clock)
    with pytest.raises(RuntimeError), watch.phase("export"):
        clock.now += 1.5
        raise RuntimeError("disk full")
    assert watch.lap().export == 1.5


def test_the_cpu_needs_no_synchronisation():
    assert device_synchronizer("cpu")() is None
