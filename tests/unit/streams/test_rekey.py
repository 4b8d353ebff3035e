"""Each rollout's group, as `forge-rl rekey-events` learns it from a log keyed by rollout."""

from __future__ import annotations

from streams.replay.rekey import groups_of_rollouts
from tests.unit.streams.test_pipeline import rollout


def test_a_rollout_is_keyed_by_the_group_its_start_names_and_one_without_a_start_by_nothing():
    a, b = rollout("a", "g1", 2, 0, 0.0, 3.0), rollout("b", "g2", 2, 1, 0.0, 3.0)
    orphan = rollout("c", "g1", 2, 2, 0.0, 3.0)[1:]  # its start outside the stretch read
    assert groups_of_rollouts([*a, *b, *orphan]) == {"a": "g1", "b": "g2"}
