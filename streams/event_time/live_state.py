"""Everything the live worker builds from the records of one consumer-group generation (pure).

Faust seeks every partition of a new assignment back to its committed offset, so what was
built from the records read before goes with the generation: each forge.events partition's
open rollouts and groups, and how far each is processed (the watermarks' source). A kept
partition is read again from its floor and rebuilt exactly: the floors
(``streams.event_time.commit_floor``) are the only state that outlives a generation, as Kafka's
committed offsets, each with the newest event time of the records before it
(``streams.event_time.floor_event_time``), beside the marks of the groups settled.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from streams.event_time.watermarks import EventsProgress
from streams.stage.events_partition import EventsPartition


@dataclass
class LiveState:
    generation: int
    progress: EventsProgress
    partitions: dict[int, EventsPartition] = field(default_factory=dict)
    """By forge.events partition, each created once its marks are loaded."""

    def reached(self, partition: int) -> int | None:
        """The next offset to process of one partition (None: nothing read of it yet)."""
        found = self.partitions.get(partition)
        return None if found is None else found.next_offset


class Generations:
    """The state of the generation the worker is in: the first record (or timer) of a newer
    one starts afresh; one of an older one finds none (it is read again from the floor)."""

    def __init__(self, new: Callable[[int], LiveState]) -> None:
        self._new = new
        self._state: LiveState | None = None

    def state_in(self, generation: int) -> LiveState | None:
        if self._state is None or generation > self._state.generation:
            self._state = self._new(generation)
        return self._state if generation == self._state.generation else None

    def current(self, generation: int) -> LiveState | None:
        """The state built in ``generation``, if any record of it has been read."""
        state = self._state
        return state if state is not None and state.generation == generation else None
