from streams.after_commit import AfterCommit


def test_items_are_released_once_their_message_is_below_the_committed_offset():
    held: AfterCommit[str] = AfterCommit()
    for partition, offset, item in [(0, 5, "a"), (0, 9, "b"), (1, 2, "c"), (0, 7, "d")]:
        held.hold(partition, offset, item)
    assert held.release(0, None) == []  # nothing committed yet
    assert held.release(0, 5) == []  # the committed offset is the next one to read
    assert held.release(0, 8) == ["a", "d"] and held.held(0) == 1
    assert held.release(0, 8) == []
    assert held.release(1, 100) == ["c"] and held.release(0, 10) == ["b"]


def test_partitions_no_longer_owned_are_dropped():
    held: AfterCommit[str] = AfterCommit()
    held.hold(0, 1, "a")
    held.hold(1, 1, "b")
    held.hold(2, 1, "c")
    assert sorted(held.keep_only([1])) == ["a", "c"]
    assert held.held(0) == 0 and held.release(1, 2) == ["b"]
