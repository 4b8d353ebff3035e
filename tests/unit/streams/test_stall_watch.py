"""A partition left behind by Faust's fetcher is named only after its patience, and never
while it is fetched, caught up or moving."""

from __future__ import annotations

from streams.stall_watch import StallWatch


def test_an_unfetched_partition_with_records_behind_an_unmoved_offset_stalls_after_patience():
    watch: StallWatch[str] = StallWatch(patience_s=30)
    assert not watch.stalled("p0", 14, 40, fetched=False, now=0)
    assert not watch.stalled("p0", 14, 40, fetched=False, now=29)
    assert watch.stalled("p0", 14, 40, fetched=False, now=30)


def test_fetched_caught_up_or_moving_partitions_never_stall():
    watch: StallWatch[str] = StallWatch(patience_s=30)
    for now in (0, 40, 80):
        assert not watch.stalled("busy", 14, 40, fetched=True, now=now)  # the agent is slow
        assert not watch.stalled("idle", 40, 40, fetched=False, now=now)  # nothing to read
        assert not watch.stalled("moving", 14 + now, 200, fetched=False, now=now)


def test_the_patience_starts_again_when_fetching_resumes_or_the_offset_moves():
    watch: StallWatch[str] = StallWatch(patience_s=30)
    watch.stalled("p0", 14, 40, fetched=False, now=0)
    assert not watch.stalled("p0", 14, 40, fetched=True, now=20)
    assert not watch.stalled("p0", 14, 40, fetched=False, now=45)
    assert watch.stalled("p0", 14, 40, fetched=False, now=50)
    assert not watch.stalled("p0", 20, 40, fetched=False, now=60)
    watch.keep_only(["p1"])  # lost in a rebalance: its history goes
    assert not watch.stalled("p0", 20, 40, fetched=False, now=85)
