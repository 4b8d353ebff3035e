"""The open rollouts of one partition, held at their start until released, and what reading
the partition again from the floor rebuilds."""

from __future__ import annotations

from datetime import timedelta

from schemas.records import Envelope
from streams.stage.assembler import RolloutAssembly
from streams.stage.open_rollouts import OpenRollouts
from tests.unit.streams.test_pipeline import env, rollout

LIMIT = timedelta(seconds=120)


def interleaved(*rollouts: list[Envelope]) -> list[Envelope]:
    """The rollouts' events in event-time order, as one partition holds them."""
    return sorted((e for r in rollouts for e in r), key=lambda e: e.ts)


def ids(events: list[Envelope]) -> list[str]:
    return [e.event_id for e in events]


def read(rollouts: OpenRollouts, log: list[Envelope], start: int = 0):
    """Offer the log from ``start``; the rollouts that ended, by id."""
    out = {}
    for offset in range(start, len(log)):
        done = rollouts.add(offset, log[offset])
        if done is not None:
            out[done.rollout_id] = done
    return out


def test_a_rollout_is_held_from_its_start_until_released():
    a, b = rollout("a", "g", 2, 0, 0.0, 3.0), rollout("b", "g", 2, 1, 1.0, 9.0)
    log = interleaved(a, b)
    rollouts = OpenRollouts(LIMIT)
    sent = read(rollouts, log[:-1])  # b's end not read yet
    assert set(sent) == {"a"} and len(rollouts) == 1
    expected = RolloutAssembly("a")
    for e in a:
        expected.add(e)
    assert sent["a"].assembly.assemble() == expected.assemble()
    assert sent["a"].group == "g" and sent["a"].offset == 0
    assert ids(sent["a"].assembly.events) == ids(a)
    assert rollouts.floor.floor() == 0  # a ended, its group not committed
    rollouts.release("a")
    assert rollouts.floor.floor() == log.index(b[0])  # b, still open, holds it now


def test_read_again_from_the_floor_the_open_rollouts_are_rebuilt_and_the_ended_ones_left_alone():
    a, b, c = (rollout(r, "g", 3, i, float(i), 4.0 + 3 * i) for i, r in enumerate("abc"))
    log = interleaved(a, b, c)
    before_c_ends = log.index(c[-1])
    first = OpenRollouts(LIMIT)
    for done in read(first, log[:before_c_ends]).values():
        first.release(done.rollout_id)
    floor = first.floor.floor()
    assert floor == log.index(c[0])
    again = OpenRollouts(LIMIT)  # a restart: the same partition, from its committed floor
    rebuilt = read(again, log, floor)
    assert set(rebuilt) == {"c"}  # a and b started before the floor: their events are not theirs
    fresh = read(OpenRollouts(LIMIT), log)
    assert ids(rebuilt["c"].assembly.events) == ids(fresh["c"].assembly.events)
    assert rebuilt["c"].assembly.assemble() == fresh["c"].assembly.assemble()


def test_duplicates_and_events_outside_start_and_end_are_not_admitted():
    events = rollout("a", "g", 1, 0, 0.0, 3.0)
    stray = env("z", events[1].payload, 0.5)  # no start of z in the partition
    log = [stray, *events[:2], events[1], *events[2:], events[2]]
    rollouts = OpenRollouts(LIMIT)
    sent = read(rollouts, log)
    assert ids(sent["a"].assembly.events) == ids(events)  # each once, start to end
    assert read(rollouts, [events[0]], 0) == {} and len(rollouts) == 0  # held: no reopening


def test_a_rollout_never_ended_is_let_go_after_the_limit_of_event_time():
    stuck = rollout("s", "g", 2, 0, 0.0, 1.0)[:-1]
    later = rollout("l", "h", 1, 1, 100.0, 200.0)
    log = [*stuck, *later]
    rollouts = OpenRollouts(LIMIT)
    expired = []
    for offset, event in enumerate(log):
        done = rollouts.add(offset, event)
        expired += rollouts.expire()
        if done is not None:
            rollouts.release(done.rollout_id)
    [gone] = expired
    assert gone.rollout_id == "s" and gone.offset == 0 and "within 120 s" in gone.reason
    assert len(rollouts) == 0 and rollouts.floor.floor() == 0  # its letter first
    rollouts.release(gone.rollout_id)
    assert rollouts.floor.floor() == len(log)
