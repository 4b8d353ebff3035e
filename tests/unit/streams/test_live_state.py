"""What one consumer-group generation built, and the floors it commits."""

from __future__ import annotations

from datetime import timedelta

from schemas import codec
from streams.group_scorer import GroupScorer
from streams.live_state import Generations, LiveState, ScorerPartition
from streams.pipeline import PipelineConfig
from streams.settled_groups import SettledGroups
from streams.watermarks import EventsProgress, SharedHorizon
from tests.unit.streams.test_pipeline import rollout


def new_state(generation: int) -> LiveState:
    return LiveState(generation, timedelta(minutes=2), EventsProgress(3.0))


def test_a_newer_generation_starts_afresh_and_an_older_one_finds_nothing():
    generations = Generations(new_state)
    first = generations.at(3)
    assert first is not None and generations.at(3) is first and generations.current(3) is first
    second = generations.at(5)
    assert second is not None and second is not first
    assert generations.at(3) is None and generations.current(3) is None
    assert generations.current(5) is second


def test_only_the_floors_that_moved_past_the_last_commit_are_committed():
    state = new_state(1)
    events = rollout("a", "g", 2, 0, 0.0, 3.0)
    rollouts = state.rollouts_of(2)
    for offset, event in enumerate(events[:2]):
        rollouts.add(offset, event, codec.encode(event))
    state.rollouts_of(3)  # nothing read of it: no floor
    timeout = timedelta(minutes=1)
    groups = GroupScorer(
        PipelineConfig(group_timeout_s=timeout.total_seconds()), SettledGroups(timeout)
    )
    groups.floor.processed(6)
    state.scorers[0] = ScorerPartition(groups, SharedHorizon(timedelta(seconds=5)))
    assert state.floors("ev", "sc") == {("ev", 2): 0, ("sc", 0): 7}
    assert state.reached("ev", "sc", "ev", 2) == 2 and state.reached("ev", "sc", "sc", 0) == 7
    assert state.reached("ev", "sc", "ev", 3) is None and state.reached("ev", "sc", "sc", 1) is None
    state.committed.update(state.floors("ev", "sc"))
    assert state.floors("ev", "sc") == {}
    groups.floor.processed(7)
    assert state.floors("ev", "sc") == {("sc", 0): 8}
