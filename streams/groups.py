"""When a group is complete, and what settling it sends on (pure).

A group is complete when all its members ended by its deadline (its first start + the group
timeout). Otherwise it times out at the deadline: once event time passes it, or at once when
every member has arrived and one ended after it. The members that ended by the deadline are
scored and any later one is turned away, whenever it arrives: the outcome is the log's, not
how fast a worker read it (a late member used to count in the replay always, live only when
its bundle beat the horizon). ``settle_group`` is that rule for the replay and the live
worker alike; ``GroupScorer`` applies it to the worker's tables (``streams.tables``), one
arrival at a time.

Delivery is at least once: a member's bundle can arrive again (its rollout's end read again
after a restart, possibly assembled from less). The fuller bundle is kept, so a copy never
replaces what was stored; and a settled group's tables are forgotten only once the message
that settled it is committed, so one read again settles it again, the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from schemas.records import Trajectory
from streams.assembler import AssembledRollout
from streams.rewards import RewardConfig
from streams.scoring import score_trajectories
from streams.tables import GroupTables, Member, MissingBundleError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SettledGroup:
    completed_at: datetime
    members: list[AssembledRollout]
    """Scored together, in queue order."""
    late: list[AssembledRollout]
    """Ended after the group's timeout: left out of the scoring."""
    timed_out: bool


def deadline(members: Iterable[AssembledRollout], timeout: timedelta) -> datetime:
    return min(m.started_ts for m in members) + timeout


def settle_group(
    members: list[AssembledRollout], horizon: datetime, timeout: timedelta
) -> SettledGroup | None:
    """The group settled at event time ``horizon`` (the newest event seen), or None while it
    is still open."""
    members = sorted(members, key=lambda r: (r.queue_index, r.rollout_id))
    size = members[0].group_size
    due = deadline(members, timeout)
    if len(members) >= size:
        whole = members[:size]
        if max(m.ended_ts for m in whole) <= due:
            return SettledGroup(max(m.ended_ts for m in whole), whole, [], False)
    elif horizon < due:
        return None
    present = [m for m in members if m.ended_ts <= due]
    late = [m for m in members if m.ended_ts > due]
    return SettledGroup(due, present, late, True)


@dataclass(frozen=True)
class Settlement:
    """What the scorer sends on for one arrival; ``GroupScorer.close`` then forgets it."""

    trajectories: list[Trajectory]
    dead: list[tuple[bytes, str]]
    """Bundles for forge.dlq, each with its reason."""
    present: list[Member]
    """The members that ended in time (their calls go to the analytics)."""
    timed_out: bool = False
    stored: tuple[str, ...] = ()
    """The members the tables hold, to be deleted."""
    rollouts: frozenset[str] = frozenset()
    """Every member it settled (scored, late or rejected): a copy arriving later is dropped."""
    closes: bool = True
    """False for an arrival turned away from a group settled before."""


@dataclass(frozen=True)
class _Closed:
    timed_out: bool
    stored: tuple[str, ...]
    rollouts: frozenset[str]


class GroupScorer:
    """The scorer's rule over its tables: an arrival is a member's bundle, or a tick (an empty
    one) carrying the event time the group may be settled at."""

    def __init__(self, tables: GroupTables, timeout: timedelta, rewards: RewardConfig) -> None:
        self.tables = tables
        self.timeout = timeout
        self.rewards = rewards
        self._closed: dict[bytes, _Closed] = {}
        """Groups settled and sent on whose tables wait for ``forget``."""

    def offer(
        self, group: bytes, bundle: bytes, horizon: datetime | None = None
    ) -> Settlement | None:
        """The group's settlement, or None while it stays open (an arrived member is stored).
        Without ``horizon`` (an arrival, not a tick) only a full group settles. A member
        arriving after its group was scored at the timeout is turned away."""
        if self.tables.is_scored(group):
            return (
                Settlement([], [(bundle, SCORED_AT_TIMEOUT)], [], closes=False) if bundle else None
            )
        closed = self._closed.get(group)
        if closed is not None:
            return _turned_away(closed, bundle)
        stored = self.tables.members_of(group)
        members = dict(stored)
        arrived = Member.of(bundle) if bundle else None
        if arrived is not None:
            known = members.get(arrived.rollout_id)
            if known is not None and len(known.events.events) >= len(arrived.events.events):
                arrived = None  # a copy, no fuller than the bundle stored: that one stays
            else:
                members[arrived.rollout_id] = arrived
        if not members:
            return None
        assembled = [m.assembled for m in members.values()]
        settled = settle_group(assembled, horizon or _NEVER, self.timeout)
        if settled is None:
            self.tables.keep(group, members, arrived)
            return None
        scored = score_trajectories(settled.members, self.rewards, settled.completed_at)
        late = "ended after its group's timeout"
        dead = [
            (members[m.rollout_id].bundle, f"rollout {m.rollout_id} {late}") for m in settled.late
        ]
        dead += [(members[r.rollout.rollout_id].bundle, r.reason) for r in scored.rejected]
        present = [members[m.rollout_id] for m in settled.members]
        return Settlement(
            scored.trajectories, dead, present, settled.timed_out, tuple(stored),
            frozenset(members),
        )  # fmt: skip

    def close(self, group: bytes, settlement: Settlement) -> None:
        """After the settlement was sent on: the group takes no more arrivals. Its tables stay
        until ``forget``, which the caller runs once the message that settled it is committed:
        read again after a restart before that, the message finds the group whole."""
        if settlement.closes:
            self._closed[group] = _Closed(
                settlement.timed_out, settlement.stored, settlement.rollouts
            )

    def forget(self, group: bytes) -> None:
        """A closed group's tables go (a group scored at its timeout stays marked)."""
        closed = self._closed.pop(group, None)
        if closed is not None:
            self.tables.forget(group, closed.stored, closed.timed_out)

    def drop(self, groups: Iterable[bytes]) -> None:
        """Closed groups of partitions this worker lost: their new owner, finding them in the
        tables, settles them again (the same way) and forgets them."""
        for group in groups:
            self._closed.pop(group, None)

    def due(self, horizon: datetime) -> list[bytes]:
        """Open groups whose deadline ``horizon`` has passed; a group whose tables are not
        readable now is left for the next check (the tick would only ask the agent anyway)."""
        due = []
        for group in self.tables.open_groups():
            if group in self._closed:
                continue
            try:
                if self._deadline(group) <= horizon:
                    due.append(group)
            except MissingBundleError as error:
                log.warning("timeout check skipped: %s", error)
        return due

    def _deadline(self, group: bytes) -> datetime:
        members = self.tables.members_of(group).values()
        return deadline((m.assembled for m in members), self.timeout)


SCORED_AT_TIMEOUT = "member of a group scored at its timeout"


def _turned_away(closed: _Closed, bundle: bytes) -> Settlement | None:
    """An arrival at a group closed here: a tick or a copy of a member is nothing; another
    member is dead-lettered (the group was scored without it)."""
    if not bundle or Member.of(bundle).rollout_id in closed.rollouts:
        return None
    reason = SCORED_AT_TIMEOUT if closed.timed_out else "member of a group already scored"
    return Settlement([], [(bundle, reason)], [], closes=False)


_NEVER = datetime.min.replace(tzinfo=UTC)
