"""Random and mutated bytes on the worker's own topics — the watermarks and the settled marks
— are refused with a ValueError, the one error the worker skips or dead-letters there; hostile
values inside decodable events are scored or refused as the replay does, never a crash."""

from __future__ import annotations

import contextlib
import math
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.records import QueueEntry
from streams.event_time.watermarks import SharedHorizon, Watermark, decode_round, encode_round
from streams.pipeline_config import PipelineConfig
from streams.replay.pipeline import process_log
from streams.stage.events_partition import EventsPartition
from streams.stage.settled_groups import SettledGroups, SettledMark
from tests.builders import T0
from tests.unit.streams.test_pipeline import rollout

TIMEOUT = timedelta(seconds=60)
MARK = SettledMark(True, frozenset({"a"}), T0).encode()
WATERMARK = encode_round([Watermark(0, T0, True, False, 17), Watermark(1, None, False, False)])


def mutations(valid: bytes):
    @st.composite
    def mutated(draw):
        data = bytearray(valid)
        for _ in range(draw(st.integers(1, 4))):
            at = draw(st.integers(0, max(len(data) - 1, 0)))
            kind = draw(st.sampled_from(["flip", "cut", "grow"]))
            if kind == "flip" and data:
                data[at] ^= draw(st.integers(1, 255))
            elif kind == "cut":
                del data[at:]
            else:
                data[at:at] = draw(st.binary(min_size=1, max_size=16))
        return bytes(data)

    return st.one_of(mutated(), st.binary(max_size=64))


@given(mutations(MARK))
@settings(max_examples=500, deadline=None)
def test_bytes_read_as_a_mark_are_a_mark_or_a_value_error(data):
    with contextlib.suppress(ValueError):
        SettledMark.decode(data)


@given(mutations(WATERMARK))
@settings(max_examples=500, deadline=None)
def test_bytes_in_the_watermark_topic_are_a_round_or_a_value_error(data):
    horizon = SharedHorizon(timedelta(seconds=1))
    horizon.read_round(Watermark(1, T0, False, False))
    with contextlib.suppress(ValueError):
        horizon.read_round(*decode_round(data))  # and the horizon takes it
        horizon.horizon(2)


def test_event_times_before_the_epoch_or_without_a_zone_are_refused():
    far = Watermark.decode(b"0|9999-12-31T23:59:59+00:00|1|0|5")  # far ahead: computable
    assert far.newest is not None and far.newest.year == 9999 and far.counted == 5
    for raw in (b"0001-01-01T00:00:00+00:00", b"1969-12-31T23:59:59+00:00", b"2026-11-01T00:00"):
        with pytest.raises(ValueError):
            Watermark.decode(b"0|" + raw + b"|1|0|5")
    with pytest.raises(ValueError):
        Watermark.decode(b"0||1|0|-1")


@given(
    st.integers(-3, 3),
    st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.none()),
    st.floats(-1e6, 1e6),
)
@settings(max_examples=200, deadline=None)
def test_hostile_values_in_decodable_events_are_scored_or_refused_as_the_replay_does(
    size, outcome, end
):
    events = rollout("a", "g", size, 0, 0.0, abs(end) if math.isfinite(end) else 1.0)
    if outcome is not None:
        events = rollout("a", "g", size, 0, 0.0, abs(end), outcome=outcome)
    config = PipelineConfig(group_timeout_s=TIMEOUT.total_seconds())
    live = EventsPartition(config, 2 * TIMEOUT, SettledGroups(TIMEOUT))
    settled = [s for i, e in enumerate(events) for s in live.add(i, e).settlements]
    horizon = max(e.ts for e in events)  # where the replay of this log stops
    settled += live.check_timeouts(horizon).settlements
    replay = process_log(events, [(0, QueueEntry("a", "g", size, T0))], [], config)
    assert [t for s in settled for t in s.trajectories] == replay.trajectories
