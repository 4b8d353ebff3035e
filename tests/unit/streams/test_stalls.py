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
