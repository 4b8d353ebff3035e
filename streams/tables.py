"""The live worker's tables and the order it writes them in (pure: any mutable mapping).

In the worker each mapping is a Faust table with a changelog; in tests a dict. Keys and values
are bytes (a str key would not survive changelog recovery). Every write order below leaves
the tables consistent between any two writes, so a kill -9 anywhere is recovered from the
changelogs:

- **Assembler** (keyed by rollout): ``rollout-events`` holds each admitted event once, under
  ``<rollout>\\0<event id>``; ``rollout-index`` its rollout's ``RolloutIndex``. The event is
  written before the index that names it. Once its bundle is on its way an ended rollout's
  index says so (it admits nothing more; the message that ended it, read again, sends the
  bundle again); it is deleted before its events once the message
  that ended it is committed (``streams.after_commit``).
- **Scorer** (keyed by group): ``member-bundles`` holds each ended member's bundle under
  ``<group>\\0<rollout>``, ``group-members`` the group's member names. The bundle is written
  before the list that names it; a settled group's list is deleted before its bundles, once
  the message that settled it is committed. ``scored-groups`` marks the groups scored at
  their timeout.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass, replace

from schemas.records import Envelope, RolloutStarted
from streams import bundles
from streams.assembler import AssembledRollout, RolloutAssembly, admits, is_end

Table = MutableMapping[bytes, bytes]
TABLES = ("rollout-index", "rollout-events", "group-members", "member-bundles", "scored-groups")


@dataclass(frozen=True)
class RolloutIndex:
    """What the assembler keeps of an open rollout besides its events: their ids in log order
    (the dedup set too), its group once RolloutStarted was seen, and whether it ended. It
    admits what ``RolloutAssembly.add`` adds: the same rule (``assembler.admits``)."""

    event_ids: tuple[str, ...] = ()
    group_id: str | None = None
    ended: bool = False
    partition: int = -1
    """Of an ended rollout whose bundle was sent on: the forge.events partition and offset of
    the message that ended it, so whoever owns the partition later can delete it."""
    end_offset: int = -1

    @property
    def complete(self) -> bool:
        return self.group_id is not None and self.ended

    def admits(self, envelope: Envelope) -> bool:
        return admits(self.event_ids, self.ended, envelope)

    def with_event(self, envelope: Envelope) -> RolloutIndex:
        payload = envelope.payload
        group = self.group_id
        if group is None and isinstance(payload, RolloutStarted):
            group = payload.group_id
        return RolloutIndex((*self.event_ids, envelope.event_id), group, is_end(envelope))

    def to_bytes(self) -> bytes:
        fields: list[object] = [list(self.event_ids), self.group_id, self.ended]
        if self.end_offset >= 0:
            fields += [self.partition, self.end_offset]
        return json.dumps(fields).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> RolloutIndex:
        if not raw:
            return cls()
        event_ids, group_id, ended, *where = json.loads(raw)
        return cls(tuple(event_ids), group_id, ended, *where)


@dataclass(frozen=True)
class EndedRollout:
    rollout_id: str
    group: bytes
    """The key of its group's partition."""
    bundle: bytes


class OpenRollouts:
    """The assembler's tables: open rollouts, one event per key beside a small index, so a
    rollout's changelog traffic grows linearly with its length."""

    def __init__(self, index: Table, events: Table) -> None:
        self.index = index
        self.events = events

    def add(
        self, envelope: Envelope, raw: bytes, partition: int = -1, offset: int = -1
    ) -> EndedRollout | None:
        """Store an admitted event (``raw``: its message, read at ``partition``/``offset``).
        The event that completes its rollout is not stored: the rollout's bundle comes back,
        for the caller to send on and then ``end`` the rollout. Nothing for a duplicate or
        anything after the end — except the message that ended it, read again: a restart
        before that message's commit may have kept the ended mark but not the bundle sent
        (the changelog write delivered, the bundle's batch not yet), so the bundle is sent
        again; the scorer keeps one copy of a member."""
        rid = envelope.rollout_id
        index = self._index(rid)
        if (
            index.ended
            and index.end_offset >= 0
            and (partition, offset)
            == (
                index.partition,
                index.end_offset,
            )
        ):
            assert index.group_id is not None
            return self._ended(rid, index.group_id, index.event_ids, raw)
        if not index.admits(envelope):
            return None
        grown = index.with_event(envelope)
        if grown.complete:
            assert grown.group_id is not None
            return self._ended(rid, grown.group_id, index.event_ids, raw)
        self.events[_event_key(rid, envelope.event_id)] = raw
        self.index[rid.encode()] = grown.to_bytes()
        return None

    def _ended(
        self, rollout_id: str, group_id: str, stored_ids: tuple[str, ...], raw: bytes
    ) -> EndedRollout:
        stored = (self.events[_event_key(rollout_id, e)] for e in stored_ids)
        return EndedRollout(rollout_id, group_id.encode(), bundles.pack((*stored, raw)))

    def end(self, rollout_id: str, partition: int, offset: int) -> None:
        """Its bundle is on its way: from now on the rollout admits nothing (the message that
        ended it read again included) until ``close`` forgets it."""
        index = replace(self._index(rollout_id), ended=True, partition=partition, end_offset=offset)
        self.index[rollout_id.encode()] = index.to_bytes()

    def ended_in(self, partition: int) -> list[tuple[int, str]]:
        """(offset of the message that ended it, rollout) of every ended rollout of
        ``partition`` still held: what a new owner of the partition has to close."""
        found = []
        for key, raw in list(self.index.items()):
            index = RolloutIndex.from_bytes(raw)
            if index.ended and index.partition == partition and index.end_offset >= 0:
                found.append((index.end_offset, key.decode()))
        return sorted(found)

    def close(self, rollout_id: str) -> None:
        """Forget an ended rollout, its index first: the index never names a missing event."""
        key = rollout_id.encode()
        if key not in self.index:
            return
        index = self._index(rollout_id)
        del self.index[key]
        for event_id in index.event_ids:
            event_key = _event_key(rollout_id, event_id)
            if event_key in self.events:
                del self.events[event_key]

    def _index(self, rollout_id: str) -> RolloutIndex:
        return RolloutIndex.from_bytes(self.index.get(rollout_id.encode(), b""))


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


class MissingBundleError(LookupError):
    """A group lists a member whose bundle is not in the table: seen only from the timer of a
    worker resumed after a pause past its session, while its tables were being recovered (the
    agent's own reads happen between recoveries)."""

    def __init__(self, group: bytes, members: list[str]) -> None:
        super().__init__(f"group {group.decode(errors='replace')} lists {members} without a bundle")


class GroupTables:
    """The scorer's tables: each open group's ended members, and the groups scored at their
    timeout. Open groups are kept decoded too, so neither an arrival nor the timer decodes
    stored members; the tables stay the truth: a decoded group is used only while it names
    the members listed."""

    def __init__(self, members: Table, bundles: Table, scored: Table) -> None:
        self.members = members
        self.bundles = bundles
        self.scored = scored
        self._decoded: dict[bytes, dict[str, Member]] = {}

    def is_scored(self, group: bytes) -> bool:
        return bool(self.scored.get(group, b""))

    def members_of(self, group: bytes) -> dict[str, Member]:
        names = _names(self.members.get(group, b""))
        decoded = self._decoded.get(group)
        if decoded is None or decoded.keys() != set(names):
            stored = {name: self.bundles.get(_member_key(group, name), b"") for name in names}
            missing = [name for name, bundle in stored.items() if not bundle]
            if missing:
                raise MissingBundleError(group, missing)
            decoded = {name: Member.of(bundle) for name, bundle in stored.items()}
            self._decoded[group] = decoded
        return decoded

    def keep(self, group: bytes, members: dict[str, Member], arrived: Member | None) -> None:
        """The group stays open with ``members``; ``arrived`` among them is stored, its bundle
        first: every listed member has one."""
        if arrived is not None:
            self.bundles[_member_key(group, arrived.rollout_id)] = arrived.bundle
            self.members[group] = "\n".join(members).encode()
        self._decoded[group] = members

    def forget(self, group: bytes, stored: Iterable[str], timed_out: bool) -> None:
        """A settled group's ``stored`` members go, the list first: no dangling name. A group
        scored at its timeout stays marked, so a member ending later is turned away."""
        if timed_out:
            self.scored[group] = b"1"
        self._decoded.pop(group, None)
        if group in self.members:
            del self.members[group]
        for name in stored:
            key = _member_key(group, name)
            if key in self.bundles:
                del self.bundles[key]

    def open_groups(self) -> list[bytes]:
        return [group for group, names in list(self.members.items()) if names]


def _event_key(rollout_id: str, event_id: str) -> bytes:
    return f"{rollout_id}\x00{event_id}".encode()


def _member_key(group: bytes, rollout_id: str) -> bytes:
    return group + b"\x00" + rollout_id.encode()


def _names(joined: bytes) -> list[str]:
    return joined.decode().split("\n") if joined else []
