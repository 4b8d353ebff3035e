"""The gateway's event-log protocol over lists, through the real Avro codec, for unit tests.

``outage`` makes every write fail with 503; with ``lands_late`` the failed writes are kept
and ``recover()`` delivers them afterwards, as the Kafka producer's retries would.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.call.event_log import UNAVAILABLE
from gateway.errors import EventLogUnavailableError
from schemas import codec
from schemas.records import Envelope, QueueEntry


class MemoryEventLog:
    def __init__(self) -> None:
        self.events: list[bytes] = []
        self.keys: set[tuple[str, str]] = set()
        """(rollout id, key) of every event appended."""
        self.queue: list[bytes] = []
        self.outage = False
        self.lands_late = False
        self._late: list[bytes] = []

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def enqueue(self, entry: QueueEntry) -> int:
        if self.outage:
            raise EventLogUnavailableError(UNAVAILABLE)
        self.queue.append(codec.encode(entry))
        return len(self.queue) - 1

    async def append(self, group_id: str, envelopes: Sequence[Envelope]) -> None:
        self.keys.update((e.rollout_id, group_id) for e in envelopes)
        encoded = [codec.encode(e) for e in envelopes]
        if self.outage:
            if self.lands_late:
                self._late.extend(encoded)
            raise EventLogUnavailableError(UNAVAILABLE)
        self.events.extend(encoded)

    def recover(self) -> None:
        """The outage ends; writes answered 503 land now, before anything newer."""
        self.outage = False
        self.events.extend(self._late)
        self._late.clear()

    def envelopes(self, rollout_id: str | None = None) -> list[Envelope]:
        decoded = [codec.decode(e, Envelope) for e in self.events]
        return [e for e in decoded if rollout_id is None or e.rollout_id == rollout_id]
