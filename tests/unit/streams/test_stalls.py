"""A stage is stalled once its attempts have failed for the limit, and not before; a success
clears it."""

from __future__ import annotations

from streams.stalls import Stalls


def test_a_stage_failing_for_the_limit_is_stalled_until_it_succeeds():
    stalls = Stalls(limit_s=60.0)
    stalls.failed("events partition 2", 100.0, "OutOfOrderSequenceNumber")
    stalls.failed("events partition 2", 130.0, "KafkaConnectionError")
    assert stalls.stalled(159.0) == {}
    assert stalls.stalled(160.0) == {"events partition 2": "failing for 60 s: KafkaConnectionError"}
    stalls.succeeded("events partition 2")
    stalls.failed("events partition 2", 200.0, "KafkaConnectionError")
    assert stalls.stalled(230.0) == {}  # failing since 200, not 100


def test_a_stage_handed_to_another_worker_is_forgotten():
    stalls = Stalls(limit_s=1.0)
    stalls.failed("events partition 0", 0.0, "e")
    stalls.failed("sequencer", 0.0, "e")
    stalls.keep_only(lambda stage: stage == "sequencer")
    assert list(stalls.stalled(5.0)) == ["sequencer"]
