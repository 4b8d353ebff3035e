"""The open rollouts of one forge.events partition, held in memory (pure).

There is no changelog: the partition is their log. A rollout is held at the offset of its
RolloutStarted (``streams.event_time.commit_floor``) until the caller releases it — once its group's
trajectories and mark are committed, or it is dead-lettered — so a restart, or a new owner
after a rebalance, reads the partition again from the committed floor and rebuilds exactly
the rollouts whose groups are not settled. Events of rollouts whose start lies before the
floor are not admitted (``assembler.admits``): those were settled before it.

Each event is decoded once, by the caller: the rollout is assembled from the envelopes as
they arrive, and only they are kept: a rare dead letter re-encodes them
(``streams.stage.rollout_letters``).

A rollout not ended ``expire_after`` of the partition's event time after its start is let
go, so that one agent that never finishes (the gateway aborts it, but a log may hold anything)
cannot hold the floor, and what a restart reads again, back for ever. Let go at twice the
group timeout, it is late for its group whenever it ends — unless the clocks of the gateways
writing its partition differ by more than a group timeout.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from schemas.records import Envelope, RolloutStarted
from streams.event_time.commit_floor import CommitFloor
from streams.stage.assembler import RolloutAssembly, admits


@dataclass(frozen=True)
class EndedRollout:
    rollout_id: str
    group: str
    offset: int
    """Of its RolloutStarted."""
    assembly: RolloutAssembly


@dataclass(frozen=True)
class ExpiredRollout:
    rollout_id: str
    offset: int
    """Of its RolloutStarted."""
    reason: str


@dataclass
class _Open:
    offset: int
    started_ts: datetime
    group: str
    assembly: RolloutAssembly


class OpenRollouts:
    """One partition's open rollouts and its commit floor."""

    def __init__(self, expire_after: timedelta) -> None:
        self.expire_after = expire_after
        self.floor: CommitFloor[str] = CommitFloor()
        self._open: dict[str, _Open] = {}
        """In the order they started in the partition."""
        self._newest: datetime | None = None

    def __len__(self) -> int:
        return len(self._open)

    def add(self, offset: int, envelope: Envelope) -> EndedRollout | None:
        """Admit the event read at ``offset``. The event that ends its rollout returns it,
        still held until ``release``."""
        self.floor.processed(offset)
        if self._newest is None or envelope.ts > self._newest:
            self._newest = envelope.ts
        rid = envelope.rollout_id
        rollout = self._open.get(rid)
        if rollout is None:
            if not admits((), False, False, envelope) or self.floor.holds(rid):
                return None  # its start is before the floor, or it ended and is held
            started = envelope.payload
            assert isinstance(started, RolloutStarted)
            assembly = RolloutAssembly(rid)
            assembly.add(envelope)
            self._open[rid] = _Open(offset, envelope.ts, started.group_id, assembly)
            self.floor.hold(rid, offset)
            return None
        if not rollout.assembly.add(envelope) or rollout.assembly.ended is None:
            return None
        del self._open[rid]
        return EndedRollout(rid, rollout.group, rollout.offset, rollout.assembly)

    def release(self, rollout_id: str) -> None:
        """The rollout is settled for good (its group's outputs committed) or its dead letter
        acknowledged: the floor may pass it."""
        self.floor.release(rollout_id)

    def expire(self) -> list[ExpiredRollout]:
        """Give up the rollouts open ``expire_after`` past their start in event time (the
        oldest first; one started out of order goes when those before it have), still held
        until ``release``: their dead letters first."""
        expired: list[ExpiredRollout] = []
        if self._newest is None:
            return expired
        # Called for every event: the open rollouts are walked only up to the first one kept
        # (copying them all each time cost 2 ms an event with 10,000 open).
        for rid, rollout in self._open.items():
            if self._newest - rollout.started_ts <= self.expire_after:
                break
            expired.append(ExpiredRollout(rid, rollout.offset, (
                f"rollout {rid} did not end within {self.expire_after.total_seconds():g} s "
                "of event time after its start: not scored (its events stay in the log)"
            )))  # fmt: skip
        for gone in expired:
            del self._open[gone.rollout_id]
        return expired
