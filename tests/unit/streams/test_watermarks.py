"""One event-time horizon across partitions and workers: a partition behind holds it back, a
caught-up one does not, a silent owner's claim lapses, a quiet log reaches its newest event."""

from __future__ import annotations

from datetime import timedelta

import pytest

from streams.event_time.watermark_rounds import tell_reads
from streams.event_time.watermarks import (
    EventsProgress,
    SharedHorizon,
    Watermark,
    decode_round,
    encode_round,
    newest_metadata,
    newest_of_metadata,
)
from streams.stalls import Stalls
from tests.builders import T0

LATENESS = timedelta(seconds=5)
IDLE = 3.0


def at(seconds: float):
    return T0 + timedelta(seconds=seconds)


def test_watermark_survives_its_encoding_and_garbage_is_a_value_error() -> None:
    marks = [Watermark(3, at(1.5), True, False, 12), Watermark(0, None, False, False)]
    for mark in marks:
        assert Watermark.decode(mark.encode()) == mark
    assert decode_round(encode_round(marks)) == marks
    for garbage in (b"\xff|garbage", b"", encode_round(marks) + b"\n"):
        with pytest.raises(ValueError):
            decode_round(garbage)


def test_a_partition_is_caught_up_once_everything_fetched_is_processed() -> None:
    progress = EventsProgress(IDLE)
    progress.processed(0, offset=9, ts=at(10), now=100.0)
    assert progress.mark(0, log_end=12, now=100.5) == Watermark(
        0, at(10), caught_up=False, quiet=False, counted=10
    )  # fetched up to 12, processed up to 10: two records still in the stream
    progress.processed(0, offset=11, ts=at(11), now=101.0)
    assert progress.mark(0, log_end=12, now=101.5).caught_up
    assert not progress.mark(0, log_end=12, now=101.5).quiet
    assert progress.mark(0, log_end=12, now=104.5).quiet
    # New records in the log, not yet fetched: behind again.
    assert not progress.mark(0, log_end=20, now=105.0).caught_up


def test_a_partition_is_caught_up_only_once_processed_to_its_end_never_by_waiting() -> None:
    """Fetched is not processed: a record still in the stream's buffer may end a member, so a
    partition level with its end but not processed stays behind however long it waits; one
    taken over at a floor at its end is caught up at once."""
    progress = EventsProgress(IDLE)
    assert not progress.mark(1, log_end=None, now=100.0).caught_up
    assert not progress.mark(1, log_end=5, now=100.0).caught_up
    assert not progress.mark(1, log_end=5, now=1000.0).caught_up
    progress.seed(1, 5, None)
    mark = progress.mark(1, log_end=5, now=1000.0)
    assert mark == Watermark(1, None, caught_up=True, quiet=True, counted=5)


def test_a_revoked_partition_starts_afresh() -> None:
    progress = EventsProgress(IDLE)
    progress.processed(2, offset=4, ts=at(4), now=100.0)
    progress.keep_only({0, 1})
    assert progress.mark(2, log_end=5, now=100.1).newest is None


def test_a_new_owner_starts_from_the_event_time_its_floor_was_committed_with() -> None:
    """Nothing before the committed floor is read again, so a partition committed to its end
    gives the next owner's watermark an event time only through the commit's metadata."""
    earlier = EventsProgress(IDLE)
    earlier.seed(0, 0, None)  # the first owner: nothing committed before it
    earlier.processed(0, offset=4, ts=at(40), now=100.0)
    earlier.processed(0, offset=5, ts=at(30), now=100.0)  # event times need not rise
    committed = newest_metadata(earlier.below_floor(0, 6))
    successor = EventsProgress(IDLE)
    successor.seed(0, 6, newest_of_metadata(committed))
    mark = successor.mark(0, log_end=6, now=200.0)
    assert mark.newest == at(40) and mark.caught_up and mark.counted == 6
    successor.processed(0, offset=6, ts=at(35), now=201.0)  # older than the seed: kept
    assert successor.mark(0, log_end=7, now=201.5).newest == at(40)
    assert successor.below_floor(0, 7) == at(40)
    successor.processed(0, offset=7, ts=at(50), now=202.0)
    assert successor.mark(0, log_end=8, now=202.5).newest == at(50)


def test_a_floor_is_committed_with_the_event_time_below_it_not_the_newest_processed() -> None:
    """A record above the floor may end a rollout whose group is not committed: a next
    owner's horizon started at it could time the group out before it reads the end again."""
    progress = EventsProgress(IDLE)
    progress.seed(0, 20, at(10))
    progress.processed(0, offset=20, ts=at(20), now=1.0)  # a rollout held from here
    progress.processed(0, offset=21, ts=at(90), now=1.0)  # its end, its group not committed
    assert progress.mark(0, log_end=22, now=1.5).newest == at(90)  # waits for it
    assert progress.below_floor(0, 20) == at(10)
    assert progress.below_floor(0, 22) == at(90)  # committed: the floor passed it


def test_a_floor_committed_without_an_event_time_seeds_nothing() -> None:
    assert newest_metadata(None) == ""
    for raw in ("", "not a time", "2026-01-01T00:00:00", "0001-01-01T00:00:00+00:00"):
        assert newest_of_metadata(raw) is None  # an older worker's, or none: unknown
    progress = EventsProgress(IDLE)
    progress.processed(3, offset=0, ts=at(5), now=1.0)
    progress.seed(3, 0, None)
    assert progress.below_floor(3, 1) == at(5) and progress.counted(3) == 1


def test_a_revoked_partition_forgets_its_seed() -> None:
    progress = EventsProgress(IDLE)
    progress.seed(2, 40, at(9))
    assert progress.counted(2) == 40
    progress.keep_only({0})
    assert progress.below_floor(2, 100) is None and progress.counted(2) == 0


def rounds(*marks_per_round: list[Watermark]) -> SharedHorizon:
    """Each list a round read mark by mark, as rounds of different workers interleave."""
    shared = SharedHorizon(LATENESS)
    for marks in marks_per_round:
        for mark in marks:
            shared.read_round(mark)
    return shared


def test_one_workers_round_is_certified_together_whatever_order_its_marks_are_in() -> None:
    """The newest time in a round counts at each of its marks: the whole round was written
    before that worker's next checks. Read one mark at a time (as if each came from another
    worker), partition 0, before the new time, would need a round more."""
    before = [caught_up(0, 10, True), caught_up(1, 10, True)]
    news = [caught_up(0, 10, True), caught_up(1, 50, True)]
    together = SharedHorizon(LATENESS)
    for marks in (before, news, news):
        together.read_round(*marks)
    assert together.horizon(2) == at(50) and together.all_quiet(2)
    apart = rounds(before, news, news)
    assert apart.horizon(2) == at(10) and not apart.all_quiet(2)


def behind(partition: int, newest: float | None) -> Watermark:
    return Watermark(partition, None if newest is None else at(newest), False, False)


def caught_up(partition: int, newest: float, quiet: bool = False) -> Watermark:
    return Watermark(partition, at(newest), True, quiet)


def test_unknown_partitions_hold_everything() -> None:
    assert rounds([behind(0, 60), behind(1, 60)]).horizon(3) is None
    assert rounds([behind(0, 60), behind(1, 60), behind(2, None)]).horizon(3) is None
    # A caught-up partition certifies nothing before its second watermark.
    assert rounds([behind(0, 60), behind(1, 60), caught_up(2, 10)]).horizon(3) is None


def test_the_partition_furthest_behind_bounds_the_horizon() -> None:
    marks = [behind(0, 100), behind(1, 40), caught_up(2, 90)]
    assert rounds(marks, marks).horizon(3) == at(40) - LATENESS


def test_a_quiet_partition_holds_nothing_back_and_a_quiet_log_reaches_its_newest_event() -> None:
    # Partition 2 went quiet long ago (event time 10); it must not hold the others back.
    live = [caught_up(0, 100), caught_up(1, 95), caught_up(2, 10, quiet=True)]
    assert rounds(live, live).horizon(3) == at(100) - LATENESS
    quiet = [caught_up(0, 100, True), caught_up(1, 95, True), caught_up(2, 10, True)]
    assert rounds(quiet, quiet).horizon(3) == at(100)
    assert rounds(quiet, quiet).all_quiet(3) and not rounds(live, live).all_quiet(3)
    assert not rounds(quiet, quiet).all_quiet(4)  # a partition never heard of
    # Quiet, but the certificates predate the newest event (read in the last round): the
    # horizon moves once more without a new event.
    earlier = [caught_up(0, 90, True), caught_up(1, 95, True), caught_up(2, 10, True)]
    moving = rounds(earlier, quiet)
    assert moving.horizon(3) == at(90) and not moving.all_quiet(3)
    assert rounds(earlier, quiet, quiet).all_quiet(3)


def test_a_silent_owner_holds_the_horizon_where_its_last_word_left_it() -> None:
    """Partition 1's worker is killed (or SIGSTOPped) after saying it is caught up; right
    after, a burst of events spanning 900 s lands on every partition and the other worker
    works through its share. Partition 1's part of the burst is unread: nothing past where
    its last word left it may time out."""
    before = [caught_up(0, 100), caught_up(1, 100), caught_up(2, 100)]
    shared = rounds(before, before)
    assert shared.horizon(3) == at(100) - LATENESS
    for newest in (400, 1000, 1000, 1000):
        shared.read_round(behind(0, newest) if newest < 1000 else caught_up(0, newest))
        shared.read_round(behind(2, newest) if newest < 1000 else caught_up(2, newest))
    assert shared.horizon(3) == at(100) - LATENESS
    shared.read_round(behind(1, 300))  # its new owner is working through the burst
    assert shared.horizon(3) == at(300) - LATENESS
    shared.read_round(caught_up(1, 1000))
    shared.read_round(caught_up(1, 1000))
    assert shared.horizon(3) == at(1000) - LATENESS


def test_only_event_time_counts_not_how_far_it_is_from_any_clock() -> None:
    """Watermarks from a gateway whose clock is an hour behind or ahead give the same horizon
    relative to their events."""
    for skew in (-3600, 0, 3600):
        marks = [behind(0, 100 + skew), behind(1, 80 + skew), caught_up(2, 90 + skew)]
        assert rounds(marks, marks).horizon(3) == at(80 + skew) - LATENESS


def test_the_marks_of_a_partition_count_what_its_next_owner_must_read_again_first():
    """The previous owner's marks count records above the floor it committed: its successor
    judges the partition's groups only once it has processed them again."""
    shared = SharedHorizon(LATENESS)
    shared.read_round(Watermark(0, at(50), True, False, counted=120))
    shared.read_round(
        Watermark(0, at(50), True, False, counted=90)
    )  # the successor's, from its floor
    assert shared.counted(0) == 120 and shared.counted(1) == 0
    successor = EventsProgress(IDLE)
    successor.seed(0, 90, at(40))
    assert successor.counted(0) < shared.counted(0)
    successor.processed(0, offset=119, ts=at(50), now=1.0)
    assert successor.counted(0) == shared.counted(0)


def test_a_next_owner_reaches_the_newest_event_time_though_it_reads_nothing_again():
    """After a rebalance that reads nothing again, the successor's watermarks carry the event
    time its floor was committed with, and the horizon reaches it."""
    earlier = EventsProgress(IDLE)
    earlier.processed(0, offset=0, ts=at(100), now=1.0)
    successor = EventsProgress(IDLE)
    successor.seed(0, 1, earlier.below_floor(0, 1))
    marks = [successor.mark(0, log_end=1, now=10.0 + i * IDLE) for i in range(2)]
    assert rounds(marks[:1], marks[1:]).horizon(1) == at(100)


def test_each_partition_behind_in_a_round_is_told_to_the_stalls_and_a_caught_up_one_cleared():
    stalls = Stalls(limit_s=10.0)
    behind = Watermark(2, None, caught_up=False, quiet=False, counted=7)
    tell_reads(stalls, [behind, Watermark(5, None, caught_up=True, quiet=True, counted=3)], 0.0)
    tell_reads(stalls, [behind], 10.0)
    assert stalls.stalled(10.0) == {
        "events partition 2 reads": "no success for 10 s, records from offset 7 on not processed"
    }
    tell_reads(stalls, [Watermark(2, None, caught_up=True, quiet=False, counted=9)], 11.0)
    assert stalls.stalled(30.0) == {}
