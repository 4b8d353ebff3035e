"""The committed offset never passes the first message of anything held."""

from __future__ import annotations

from streams.event_time.commit_floor import CommitFloor


def test_the_floor_is_the_oldest_hold_or_the_next_offset_to_process():
    floor: CommitFloor[str] = CommitFloor()
    assert floor.floor() is None and floor.next is None  # nothing read: nothing to commit
    floor.processed(10)
    assert floor.floor() == 11
    floor.hold("a", 11)
    floor.processed(11)
    floor.hold("b", 12)
    floor.hold("a", 13)  # held already: keeps its first offset
    floor.processed(13)
    assert floor.floor() == 11 and floor.held == 2 and floor.holds("a")
    floor.release("a")
    assert floor.floor() == 12
    floor.release("b")
    floor.release("b")  # released twice: nothing
    assert floor.floor() == 14 and not floor.holds("a")


def test_a_message_read_again_never_moves_the_floor_back():
    floor: CommitFloor[str] = CommitFloor()
    floor.processed(5)
    floor.processed(3)
    assert floor.floor() == 6 and floor.next == 6
