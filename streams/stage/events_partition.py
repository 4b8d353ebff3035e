"""One forge.events partition as the live worker holds it: its open rollouts, its open groups
and its commit floor, fed one decoded event at a time (pure).

A rollout is held in the floor from its start until it is let go for good: dead-lettered
(larger than one message, never ended, turned away by a committed group) or its group's
outputs committed (``written``). So the floor never passes a member of a group not yet
committed — not even a late one, whose earlier start sets the group's deadline — and a
restart that reads the partition again from it settles every such group as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from infra.partitioner import partition_of_key
from schemas.records import Envelope, RolloutStarted
from streams.pipeline_config import PipelineConfig
from streams.stage import rollout_letters
from streams.stage.group_scorer import GroupScorer, Member, Settlement
from streams.stage.open_rollouts import OpenRollouts
from streams.stage.settled_groups import SettledGroups

REKEY_COMMAND = "forge-rl rekey-events"


def misplaced(envelope: Envelope, partition: int, partitions: int) -> str | None:
    """Why a rollout's start is not where its group's events belong (a log written before
    forge.events was keyed by group id: its groups' members spread over partitions, which no
    one worker can score), or None when it is."""
    start = envelope.payload
    if not isinstance(start, RolloutStarted):
        return None
    home = partition_of_key(start.group_id.encode(), partitions)
    if home == partition:
        return None
    return (
        f"rollout {envelope.rollout_id} starts on forge.events partition {partition}, but its "
        f"group {start.group_id} hashes to {home}: the log is keyed by rollout, not group id, "
        f"and is not scored live (a replay reads it as it is); rewrite it with "
        f"`{REKEY_COMMAND} --out-topic TOPIC` and run the worker on TOPIC under a new "
        f"FORGE_STREAMS_APP_ID"
    )


@dataclass(frozen=True)
class DeadRollout:
    """A rollout for forge.dlq, named by its start's offset."""

    key: bytes
    offset: int
    reason: str
    value: bytes = b""
    release: str | None = None
    """The rollout the floor may pass once the letter is acknowledged (``release``); None
    for a member of a settled group, let go with its group."""


@dataclass
class Outputs:
    settlements: list[Settlement] = field(default_factory=list)
    dead: list[DeadRollout] = field(default_factory=list)


class EventsPartition:
    def __init__(
        self,
        config: PipelineConfig,
        expire_after: timedelta,
        settled: SettledGroups,
        taken_over_at: int = 0,
    ) -> None:
        self.rollouts = OpenRollouts(expire_after)
        self.groups = GroupScorer(config, settled)
        self.taken_over_at = taken_over_at
        """The floor committed when this worker took the partition over: the records below it
        are done (the consumer may still hand some over, positioned before a previous owner's
        last commit)."""
        self._offsets: dict[str, int] = {}
        """Each ended member's start, while its group is not committed: its dead letter's."""

    @property
    def settled(self) -> SettledGroups:
        return self.groups.settled

    def add(self, offset: int, envelope: Envelope) -> Outputs:
        """The event read at ``offset``."""
        out = Outputs()
        ended = self.rollouts.add(offset, envelope)
        if ended is not None:
            reason = rollout_letters.oversize_events(ended.rollout_id, ended.assembly.events)
            if reason is not None:
                out.dead.append(DeadRollout(ended.group.encode(), ended.offset, reason,
                                            release=ended.rollout_id))  # fmt: skip
            else:
                self._offsets[ended.rollout_id] = ended.offset
                self._settled(
                    self.groups.settlement_for(ended.group, Member.from_ended(ended)), out
                )
        for expired in self.rollouts.expire():
            out.dead.append(DeadRollout(expired.rollout_id.encode(), expired.offset,
                                        expired.reason, release=expired.rollout_id))  # fmt: skip
        return out

    def passed(self, offset: int) -> None:
        """The record at ``offset`` is no event (it went to the dead letters)."""
        self.rollouts.floor.processed(offset)

    def check_timeouts(self, horizon: datetime) -> Outputs:
        """Settle every open group whose deadline event time ``horizon`` has passed."""
        out = Outputs()
        for group in self.groups.due(horizon):
            self._settled(self.groups.settlement_for(group, None, horizon), out)
        return out

    def _settled(self, settlement: Settlement | None, out: Outputs) -> None:
        if settlement is None:
            return
        dead = {member.rollout_id for member, _ in settlement.dead}
        for member, reason in settlement.dead:
            offset = self._offsets[member.rollout_id]
            after = member.rollout_id if settlement.mark is None else None  # else with the group
            out.dead.append(DeadRollout(settlement.group.encode(), offset, reason,
                                        member.letter(), after))  # fmt: skip
        for rollout_id in settlement.released:
            if rollout_id not in dead:
                self.release(rollout_id)
        if settlement.mark is not None:
            out.settlements.append(settlement)

    def writing(self, group: str) -> None:
        """The group goes into a transaction with the floor: the floor there may pass its
        members."""
        for rollout_id in self.groups.writing(group):
            self.release(rollout_id)

    def written(self, group: str) -> None:
        """The group's trajectories and mark are committed."""
        for rollout_id in self.groups.written(group):
            self.release(rollout_id)

    def release(self, rollout_id: str) -> None:
        """The rollout is done with here (its dead letter acknowledged, or its group's outputs
        committed): the floor may pass it."""
        self._offsets.pop(rollout_id, None)
        self.rollouts.release(rollout_id)

    def floor(self) -> int | None:
        """The offset to commit (the next a restart reads); None before any event."""
        return self.rollouts.floor.floor()

    @property
    def next_offset(self) -> int | None:
        return self.rollouts.floor.next
