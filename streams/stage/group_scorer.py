"""The open groups of one forge.events partition, settled by the rule the replay uses
(``streams.stage.groups.settle_group``), one ended member or one timeout check at a time (pure).

Every member of a group is on its group's partition (forge.events is keyed by group id), so
the worker that reads the partition assembles the members and scores the group in one place.
A settled group's trajectories and its mark (``streams.stage.settled_groups``: the members, by
rollout id) are committed together in one transaction with the partition's floor
(``streams.stage.group_writes``); until then its members stay held
(``streams.stage.open_rollouts``), so a restart reads them again and settles the group exactly as
before. Delivery is at least once: a member can end again (read again after a restart), and a copy
changes nothing; a member arriving at a settled group is turned away.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from schemas.records import Trajectory
from streams.pipeline_config import PipelineConfig
from streams.stage import rollout_letters
from streams.stage.assembler import AssembledRollout, RolloutAssembly
from streams.stage.groups import deadline, settle_group
from streams.stage.open_rollouts import EndedRollout
from streams.stage.scoring import group_domain, score_trajectories
from streams.stage.settled_groups import SettledGroups, SettledMark


@dataclass(frozen=True)
class Member:
    """An ended rollout of a group: its events and its assembly."""

    events: RolloutAssembly
    assembled: AssembledRollout

    @classmethod
    def from_ended(cls, ended: EndedRollout) -> Member:
        return cls(ended.assembly, ended.assembly.assemble())

    @property
    def rollout_id(self) -> str:
        return self.assembled.rollout_id

    def letter(self) -> bytes:
        """The whole rollout as one dead letter's value."""
        return rollout_letters.pack_events(self.events.events)


@dataclass(frozen=True)
class Settlement:
    """What one arrival or timeout check of a group sends on. Unless ``mark`` is None (an
    arrival turned away), the group then waits for ``written``."""

    group: str
    trajectories: list[Trajectory]
    dead: list[tuple[Member, str]]
    """Members for forge.dlq, each with its reason."""
    present: list[Member]
    """The members that ended in time (their calls go to the analytics)."""
    mark: SettledMark | None = None
    released: list[str] = field(default_factory=list)
    """Arrivals turned away that the floor may pass (a dead one once its letter is sent)."""


class GroupScorer:
    def __init__(self, config: PipelineConfig, settled: SettledGroups) -> None:
        self.config = config
        self.settled = settled
        self._open: dict[str, dict[str, Member]] = {}
        self._settling: dict[str, tuple[SettledMark, set[str]]] = {}
        """Settled, not yet committed: arrivals are turned away already; the rollouts the
        floor may pass once it is."""
        self._unwritten: dict[str, datetime] = {}
        """Settled, trajectories not yet committed: when each group completed."""

    @property
    def open_groups(self) -> int:
        return len(self._open)

    def settlement_for(
        self, group: str, member: Member | None, horizon: datetime | None = None
    ) -> Settlement | None:
        """A member ended (or, None, a check of the group's timeout at event time
        ``horizon``): the group's settlement, or None while it stays open (or for a check or
        copy that changes nothing). Without ``horizon`` only a full group settles."""
        settling = self._settling.get(group)
        if settling is not None:
            if member is not None and member.rollout_id in settling[0].rollouts:
                settling[1].add(member.rollout_id)  # a copy: let go with the group
                return None
            return _turned_away(group, settling[0], member)
        mark = self.settled.get(group)
        if mark is not None:
            return _turned_away(group, mark, member)
        members = self._open.get(group, {})
        if member is not None:
            if member.rollout_id in members:
                return None  # a copy: both were assembled from the log, the same
            members = {**members, member.rollout_id: member}
        if not members:
            return None
        assembled = [m.assembled for m in members.values()]
        timeout = self.config.group_timeout(group_domain(assembled))
        settled = settle_group(assembled, horizon or _NEVER, timeout)
        if settled is None:
            self._open[group] = members
            return None
        self._open.pop(group, None)
        scored = score_trajectories(settled.members, self.config, settled.completed_at)
        late = "ended after its group's timeout"
        dead = [(members[m.rollout_id], f"rollout {m.rollout_id} {late}") for m in settled.late]
        dead += [(members[r.rollout.rollout_id], r.reason) for r in scored.rejected]
        mark = SettledMark(settled.timed_out, frozenset(members), deadline(assembled, timeout))
        self._settling[group] = (mark, set(members))
        if scored.trajectories:
            self._unwritten[group] = settled.completed_at
        present = [members[m.rollout_id] for m in settled.members]
        return Settlement(group, scored.trajectories, dead, present, mark)

    def writing(self, group: str) -> set[str]:
        """The group goes into a transaction with the floor: the rollouts the floor there may
        pass (it commits with them, or not at all)."""
        held = self._settling[group][1]
        taken = set(held)
        held.clear()
        return taken

    def written(self, group: str) -> set[str]:
        """The group's trajectories and mark are committed: the rollouts that arrived at it
        since ``writing``, which the floor may pass now."""
        self._unwritten.pop(group, None)
        mark, held = self._settling.pop(group)
        self.settled.add(group, mark)
        return held

    def scored_through(self, horizon: datetime) -> datetime:
        """Every trajectory of this partition completed before the time returned has been
        committed (``streams.event_time.scored_through``), given that every member that ended by
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
        """Nothing settled unwritten, nothing due at ``horizon`` not yet checked."""
        return not self._unwritten and not self.due(horizon)

    def due(self, horizon: datetime) -> list[str]:
        """Open groups whose deadline ``horizon`` has passed."""
        return [
            group for group, members in self._open.items() if self._deadline(members) <= horizon
        ]

    def _deadline(self, members: dict[str, Member]) -> datetime:
        assembled = [m.assembled for m in members.values()]
        return deadline(assembled, self.config.group_timeout(group_domain(assembled)))


SCORED_AT_TIMEOUT = "member of a group scored at its timeout"


def _turned_away(group: str, mark: SettledMark, member: Member | None) -> Settlement | None:
    """An arrival at a settled group: a check is nothing; a copy of a member is let go;
    another member is dead-lettered (the group was scored without it), then let go."""
    if member is None:
        return None
    if member.rollout_id in mark.rollouts:
        return Settlement(group, [], [], [], released=[member.rollout_id])
    reason = SCORED_AT_TIMEOUT if mark.timed_out else "member of a group already scored"
    return Settlement(group, [], [(member, reason)], [], released=[member.rollout_id])


_NEVER = datetime.min.replace(tzinfo=UTC)
_RESOLUTION = timedelta(microseconds=1)
"""An event time's smallest step: the horizon itself is covered, "before" is strict."""
