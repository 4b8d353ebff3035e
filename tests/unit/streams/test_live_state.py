"""What one consumer-group generation built."""

from __future__ import annotations

from datetime import timedelta

from streams.event_time.live_state import Generations, LiveState
from streams.event_time.watermarks import EventsProgress
from streams.pipeline_config import PipelineConfig
from streams.stage.events_partition import EventsPartition
from streams.stage.settled_groups import SettledGroups
from tests.unit.streams.test_pipeline import rollout


def new_state(generation: int) -> LiveState:
    return LiveState(generation, EventsProgress(3.0))


def test_a_newer_generation_starts_afresh_and_an_older_one_finds_nothing():
    generations = Generations(new_state)
    first = generations.state_in(3)
    assert (
        first is not None and generations.state_in(3) is first and generations.current(3) is first
    )
    second = generations.state_in(5)
    assert second is not None and second is not first
    assert generations.state_in(3) is None and generations.current(3) is None
    assert generations.current(5) is second


def test_how_far_each_partition_is_read():
    state = new_state(1)
    timeout = timedelta(minutes=1)
    work = state.partitions[2] = EventsPartition(PipelineConfig(), timeout, SettledGroups(timeout))
    for offset, event in enumerate(rollout("a", "g", 2, 0, 0.0, 3.0)[:2], start=7):
        work.add(offset, event)
    assert state.reached(2) == 9 and state.reached(3) is None
