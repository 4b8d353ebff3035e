from __future__ import annotations

from gateway.admission import ActiveBuffer


def test_a_new_group_waits_for_room_and_a_started_group_is_admitted_whole():
    buffer = ActiveBuffer(limit=8)
    for i in range(4):
        assert buffer.admits("g0", 4)
        buffer.queued(i, "g0")
    assert buffer.admits("g1", 4)
    buffer.queued(4, "g1")
    assert buffer.admits("g1", 4)  # its members still join: the group is admitted whole
    for i in range(5, 8):
        buffer.queued(i, "g1")
    assert not buffer.admits("g2", 4) and buffer.active == 8
    buffer.consumed_to(3)
    assert not buffer.admits("g2", 4)  # 5 active + 4 > 8
    buffer.consumed_to(4)
    assert buffer.admits("g2", 4) and buffer.active == 4
    buffer.consumed_to(2)  # the head never moves back
    assert buffer.head == 4


def test_no_limit_admits_everything_and_old_entries_are_ignored():
    buffer = ActiveBuffer(limit=None)
    buffer.consumed_to(10)
    buffer.queued(3, "old")
    assert buffer.active == 0 and buffer.admits("any", 10**6)
