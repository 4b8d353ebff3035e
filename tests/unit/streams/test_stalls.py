"""A stage is stalled once it has gone the limit without a success since it began an attempt,
failing or hanging, and not before; a success clears it."""

from __future__ import annotations

from streams.stalls import Stalls


def test_a_stage_failing_for_the_limit_is_stalled_until_it_succeeds():
    stalls = Stalls(limit_s=60.0)
    stalls.failed("events partition 2 commits", 100.0, "OutOfOrderSequenceNumber")
    stalls.failed("events partition 2 commits", 130.0, "KafkaConnectionError")
    assert stalls.stalled(159.0) == {}
    assert stalls.stalled(160.0) == {
        "events partition 2 commits": "no success for 60 s, failing: KafkaConnectionError"
    }
    stalls.succeeded("events partition 2 commits")
    stalls.failed("events partition 2 commits", 200.0, "KafkaConnectionError")
    assert stalls.stalled(230.0) == {}  # failing since 200, not 100


def test_an_attempt_that_never_ends_is_a_stall_too():
    stalls = Stalls(limit_s=60.0)
    stalls.attempting("sequencer", 10.0)
    stalls.attempting("sequencer", 50.0)  # still the first attempt since the last success
    hanging = "no success for 60 s, an attempt that has not ended"
    assert stalls.stalled(70.0) == {"sequencer": hanging}
    stalls.succeeded("sequencer")
    stalls.attempting("sequencer", 80.0)
    assert stalls.stalled(139.0) == {}


def test_a_stage_handed_to_another_worker_is_forgotten():
    stalls = Stalls(limit_s=1.0)
    stalls.failed("events partition 0 commits", 0.0, "e")
    stalls.failed("sequencer", 0.0, "e")
    stalls.keep_only(lambda stage: stage == "sequencer")
    assert list(stalls.stalled(5.0)) == ["sequencer"]


def test_a_partition_with_records_to_read_is_stalled_once_its_offset_stops_moving():
    stalls = Stalls(limit_s=60.0)
    stage = "events partition 1 reads"
    stalls.behind(stage, 0, 0.0, "records from offset 0 on not processed")
    stalls.behind(stage, 40, 50.0, "records from offset 40 on not processed")  # it moved
    stalls.behind(stage, 40, 109.0, "records from offset 40 on not processed")
    assert stalls.stalled(109.0) == {}  # waiting since 50, when it last moved
    assert stalls.stalled(110.0) == {stage: "no success for 60 s, records from offset 40 on "
                                            "not processed"}  # fmt: skip
    stalls.succeeded(stage)  # caught up
    stalls.behind(stage, 40, 120.0, "records from offset 40 on not processed")
    assert stalls.stalled(179.0) == {}


def test_a_stage_that_must_speak_regularly_is_stalled_once_silent_for_the_limit():
    stalls = Stalls(limit_s=60.0)
    note = "no watermark of it read: group timeouts wait on its owner"
    for now in (0.0, 30.0, 89.0):
        stalls.heard("watermarks of events partition 3", now, note)
    assert stalls.stalled(148.0) == {}
    assert stalls.stalled(149.0) == {
        "watermarks of events partition 3": f"no success for 60 s, {note}"
    }
