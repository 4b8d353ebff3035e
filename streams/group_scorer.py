"""The scorer of one partition of its topic: open groups in memory, settled by the rule the
replay uses (``streams.groups.settle_group``), one arrival at a time (pure).

An arrival is a member's bundle, or a tick (an empty one) carrying the event time the group
may be settled at. Open groups are held at the offset of their first member's message
(``streams.commit_floor``), and a settled one until its outputs and then its mark
(``streams.settled_groups``) are acknowledged; a restart reads the partition again from the
committed floor and settles every group not marked exactly as before — the same bundles and
ticks in the same order. Delivery is at least once: a member's bundle can arrive again (its
rollout's end read again), and a copy changes nothing; a member arriving at a settled group
is turned away.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from schemas.records import Trajectory
from streams import bundles
from streams.assembler import AssembledRollout, RolloutAssembly
from streams.commit_floor import CommitFloor
from streams.groups import deadline, settle_group
from streams.pipeline import PipelineConfig
from streams.scoring import group_domain, score_trajectories
from streams.settled_groups import SettledGroups, SettledMark


@dataclass(frozen=True)
class Member:
    """A group member's bundle, its events, and its trajectory as assembled from them."""

    bundle: bytes
    events: RolloutAssembly
    assembled: AssembledRollout

    @classmethod
    def of(cls, bundle: bytes) -> Member:
        events = bundles.assembly_of(bundle)
        return cls(bundle, events, events.assemble())

    @property
    def rollout_id(self) -> str:
        return self.assembled.rollout_id


@dataclass(frozen=True)
class Settlement:
    """What the scorer sends on for one arrival. Unless ``mark`` is None (an arrival turned
    away), the group then waits for ``marked``."""

    trajectories: list[Trajectory]
    dead: list[tuple[bytes, str]]
    """Bundles for forge.dlq, each with its reason."""
    present: list[Member]
    """The members that ended in time (their calls go to the analytics)."""
    mark: SettledMark | None = None


class GroupScorer:
    def __init__(self, config: PipelineConfig, settled: SettledGroups) -> None:
        self.config = config
        self.settled = settled
        self.floor: CommitFloor[bytes] = CommitFloor()
        self._open: dict[bytes, dict[str, Member]] = {}
        self._settling: dict[bytes, SettledMark] = {}
        """Settled, outputs not yet acknowledged: arrivals are turned away already."""
        self._unwritten: dict[bytes, datetime] = {}
        """Settled, trajectories not yet acknowledged: when each group completed."""

    @property
    def open_groups(self) -> int:
        return len(self._open)

    def offer(
        self, offset: int, group: bytes, bundle: bytes, horizon: datetime | None = None
    ) -> Settlement | None:
        """The arrival read at ``offset``: its group's settlement, or None while the group
        stays open (or for a tick or copy that changes nothing). Without ``horizon`` (an
        arrival, not a tick) only a full group settles."""
        self.floor.processed(offset)
        mark = self._settling.get(group) or self.settled.get(group)
        if mark is not None:
            return _turned_away(mark, bundle)
        members = self._open.get(group, {})
        if bundle:
            arrived = Member.of(bundle)
            if arrived.rollout_id in members:
                return None  # a copy: both were assembled from the log, the same
            members = {**members, arrived.rollout_id: arrived}
        if not members:
            return None
        assembled = [m.assembled for m in members.values()]
        timeout = self.config.group_timeout(group_domain(assembled))
        settled = settle_group(assembled, horizon or _NEVER, timeout)
        self.floor.hold(group, offset)
        if settled is None:
            self._open[group] = members
            return None
        self._open.pop(group, None)
        scored = score_trajectories(settled.members, self.config, settled.completed_at)
        late = "ended after its group's timeout"
        dead = [
            (members[m.rollout_id].bundle, f"rollout {m.rollout_id} {late}") for m in settled.late
        ]
        dead += [(members[r.rollout.rollout_id].bundle, r.reason) for r in scored.rejected]
        due = deadline(assembled, timeout)
        mark = SettledMark(settled.timed_out, frozenset(members), due)
        self._settling[group] = mark
        if scored.trajectories:
            self._unwritten[group] = settled.completed_at
        present = [members[m.rollout_id] for m in settled.members]
        return Settlement(scored.trajectories, dead, present, mark)

    def written(self, group: bytes) -> None:
        """The group's trajectories are acknowledged (its mark may still be on its way)."""
        self._unwritten.pop(group, None)

    def scored_through(self, horizon: datetime) -> datetime:
        """Every trajectory of this partition completed before the time returned has been
        acknowledged (``streams.scored_through``), given that every member that ended by
        ``horizon`` has arrived. A group still open completes no earlier than the first end
        among its members here: complete, at its last member's end; timed out, at its
        deadline, which any member it scores ended by (one not here yet ended after the
        horizon). Not its deadline as it stands: a member still to come may have started
        earlier and move it back."""
        bounds = [horizon + _RESOLUTION, *self._unwritten.values()]
        bounds += [min(m.assembled.ended_ts for m in members.values())
                   for members in self._open.values()]  # fmt: skip
        return min(bounds)

    def idle(self, horizon: datetime) -> bool:
        """Nothing settled unwritten, nothing due at ``horizon`` not yet ticked."""
        return not self._unwritten and not self.due(horizon)

    def marked(self, group: bytes) -> None:
        """The group's outputs and mark are acknowledged: the floor may pass it."""
        self._unwritten.pop(group, None)
        mark = self._settling.pop(group, None)
        if mark is not None:
            self.settled.add(group, mark)
        self.floor.release(group)

    def due(self, horizon: datetime) -> list[bytes]:
        """Open groups whose deadline ``horizon`` has passed."""
        return [
            group for group, members in self._open.items() if self._deadline(members) <= horizon
        ]

    def _deadline(self, members: dict[str, Member]) -> datetime:
        assembled = [m.assembled for m in members.values()]
        return deadline(assembled, self.config.group_timeout(group_domain(assembled)))


SCORED_AT_TIMEOUT = "member of a group scored at its timeout"


def _turned_away(mark: SettledMark, bundle: bytes) -> Settlement | None:
    """An arrival at a settled group: a tick or a copy of a member is nothing; another member
    is dead-lettered (the group was scored without it)."""
    if not bundle or bundles.rollout_of(bundle) in mark.rollouts:
        return None
    reason = SCORED_AT_TIMEOUT if mark.timed_out else "member of a group already scored"
    return Settlement([], [(bundle, reason)], [])


_NEVER = datetime.min.replace(tzinfo=UTC)
_RESOLUTION = timedelta(microseconds=1)
"""An event time's smallest step: the horizon itself is covered, "before" is strict."""
