"""Everything the live worker builds from the messages of one consumer-group generation (pure).

Faust seeks every partition of a new assignment back to its committed offset, so what was
built from the messages read before goes with the generation: the open rollouts of each
forge.events partition, the open groups and horizon of each partition of the scorer's topic,
and how far each events partition is processed (the watermarks' source). A kept partition is
read again from its floor and rebuilt exactly: the floors (``streams.commit_floor``) are the
only state that outlives a generation, as Kafka's committed offsets, each events floor with
the newest event time of the records before it (``streams.floor_event_time``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from streams.group_scorer import GroupScorer
from streams.open_rollouts import OpenRollouts
from streams.watermarks import EventsProgress, SharedHorizon


@dataclass
class ScorerPartition:
    groups: GroupScorer
    horizon: SharedHorizon


@dataclass
class LiveState:
    generation: int
    expire_after: timedelta
    progress: EventsProgress
    rollouts: dict[int, OpenRollouts] = field(default_factory=dict)
    """By forge.events partition."""
    scorers: dict[int, ScorerPartition] = field(default_factory=dict)
    """By partition of the scorer's topic, created once its marks are loaded."""
    committed: dict[tuple[str, int], int] = field(default_factory=dict)
    """The floor last committed per (topic, partition) in this generation."""

    def rollouts_of(self, partition: int) -> OpenRollouts:
        found = self.rollouts.get(partition)
        if found is None:
            found = self.rollouts[partition] = OpenRollouts(self.expire_after)
        return found

    def reached(
        self, events_topic: str, scorer_topic: str, topic: str, partition: int
    ) -> int | None:
        """The next offset to process of one partition (None: nothing read of it yet)."""
        if topic == events_topic and partition in self.rollouts:
            return self.rollouts[partition].floor.next
        if topic == scorer_topic and partition in self.scorers:
            return self.scorers[partition].groups.floor.next
        return None

    def floors(self, events_topic: str, scorer_topic: str) -> dict[tuple[str, int], int]:
        """Every floor that moved past what this generation committed."""
        current = {(events_topic, p): r.floor.floor() for p, r in self.rollouts.items()}
        current |= {(scorer_topic, p): s.groups.floor.floor() for p, s in self.scorers.items()}
        return {
            where: offset
            for where, offset in current.items()
            if offset is not None and offset > self.committed.get(where, -1)
        }


class Generations:
    """The state of the generation the worker is in: the first message (or timer) of a newer
    one starts afresh; one of an older one finds none (it is read again from the floor)."""

    def __init__(self, new: Callable[[int], LiveState]) -> None:
        self._new = new
        self._state: LiveState | None = None

    def at(self, generation: int) -> LiveState | None:
        if self._state is None or generation > self._state.generation:
            self._state = self._new(generation)
        return self._state if generation == self._state.generation else None

    def current(self, generation: int) -> LiveState | None:
        """The state built in ``generation``, if any message of it has been read."""
        state = self._state
        return state if state is not None and state.generation == generation else None
