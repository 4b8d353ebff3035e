"""The worker's tables on plain dicts: what each write leaves, and the same admission rule
as the assembly."""

from __future__ import annotations

from schemas import codec
from streams import bundles
from streams.assembler import RolloutAssembly
from streams.tables import GroupTables, Member, OpenRollouts, RolloutIndex
from tests.unit.streams.test_pipeline import rollout


def replay_index(events):
    """Admitted events' raw messages and the final index, as the live assembler keeps them."""
    index, admitted = RolloutIndex(), []
    for event in events:
        if index.admits(event):
            index = index.with_event(event)
            admitted.append(codec.encode(event))
    return index, admitted


def test_the_index_admits_what_the_assembly_adds_and_completes_with_it():
    events = rollout("r1", "g7", 2, 0, 0.0, 3.0)
    noisy = [events[0], events[1], events[1], *events[2:], events[2]]  # a duplicate, a late one
    assembly = RolloutAssembly("r1")
    added = [e for e in noisy if assembly.add(e)]
    index, admitted = replay_index(noisy)
    assert index.event_ids == tuple(e.event_id for e in added)
    assert index.complete and assembly.complete and index.group_id == "g7"
    bundle = bundles.pack(admitted)
    assert bundles.assembly_of(bundle).assemble() == assembly.assemble()


def test_no_group_until_started_and_nothing_after_the_end():
    *body, end = rollout("r2", "g1", 1, 0, 0.0, 1.0, aborted=True)
    index, _ = replay_index([*body[1:], end, body[0]])  # RolloutStarted after the end
    assert index.ended and index.group_id is None and not index.complete
    assert body[0].event_id not in index.event_ids


def test_the_index_survives_its_bytes():
    index, _ = replay_index(rollout("r3", "g2", 4, 1, 0.0, 2.0)[:3])
    assert RolloutIndex.from_bytes(index.to_bytes()) == index
    assert RolloutIndex.from_bytes(b"") == RolloutIndex()


def test_open_rollouts_store_each_event_once_and_hand_over_the_bundle_at_the_end():
    index, events = {}, {}
    rollouts = OpenRollouts(index, events)
    *body, end = rollout("r1", "g7", 2, 0, 0.0, 3.0)
    for event in [*body, body[1]]:  # a duplicate
        assert rollouts.add(event, codec.encode(event)) is None
    assert len(events) == len(body) and set(index) == {b"r1"}
    done = rollouts.add(end, codec.encode(end))
    assert done is not None and done.group == b"g7" and done.rollout_id == "r1"
    assert [*bundles.messages(done.bundle)] == [codec.encode(e) for e in [*body, end]]
    assert len(events) == len(body)  # kept until the bundle is on its way
    rollouts.end("r1", partition=3, offset=17)
    for again in (end, body[1], *rollout("r1", "g7", 2, 0, 0.0, 3.0)):  # a copy later in the log
        assert rollouts.add(again, codec.encode(again), partition=3, offset=40) is None
    assert rollouts.add(end, codec.encode(end), partition=2, offset=17) is None
    assert len(events) == len(body)  # until the message that ended it is committed
    assert rollouts.ended_in(3) == [(17, "r1")] and rollouts.ended_in(0) == []
    assert len(events) == len(body)  # until the message that ended it is committed
    rollouts.close("r1")
    assert index == {} and events == {}
    rollouts.close("r1")  # closed twice (held by two owners in turn): nothing left to do
    assert rollouts.ended_in(3) == []


def test_an_index_written_before_the_ended_flag_kept_its_place_reads_as_ended_nowhere():
    raw = b'[["e1"], "g1", true]'
    assert RolloutIndex.from_bytes(raw) == RolloutIndex(("e1",), "g1", True)
    index = RolloutIndex(("e1",), "g1", True, partition=2, end_offset=9)
    assert RolloutIndex.from_bytes(index.to_bytes()) == index


def member(rid, group="g", size=2, index=0, end=3.0, **kw):
    return Member.of(
        bundles.pack(codec.encode(e) for e in rollout(rid, group, size, index, 0.0, end, **kw))
    )


def test_group_tables_list_a_member_only_after_its_bundle_and_forget_the_list_first():
    members, stored, scored = {}, {}, {}
    tables = GroupTables(members, stored, scored)
    a = member("a")
    tables.keep(b"g", {"a": a}, a)
    assert members == {b"g": b"a"} and stored == {b"g\x00a": a.bundle}
    assert tables.open_groups() == [b"g"]
    fresh = GroupTables(members, stored, scored)  # recovered from the changelogs
    assert fresh.members_of(b"g")["a"].assembled == a.assembled
    tables.forget(b"g", ["a"], timed_out=True)
    assert members == {} and stored == {} and tables.is_scored(b"g")
    assert tables.open_groups() == [] and tables.members_of(b"g") == {}


def test_the_message_that_ended_a_rollout_read_again_sends_its_bundle_again():
    """A kill -9 after the ended mark reached the changelog but before the bundle's batch was
    delivered (and before the commit): the restarted owner reads the message again, and the
    bundle must go again or the member is lost (its group scored without it)."""
    index, events = {}, {}
    *body, end = rollout("r1", "g7", 2, 0, 0.0, 3.0)
    before = OpenRollouts(index, events)
    for at, event in enumerate(body):
        before.add(event, codec.encode(event), partition=3, offset=at)
    first = before.add(end, codec.encode(end), partition=3, offset=len(body))
    assert first is not None
    before.end("r1", partition=3, offset=len(body))
    restarted = OpenRollouts(dict(index), dict(events))  # recovered from the changelogs
    again = restarted.add(end, codec.encode(end), partition=3, offset=len(body))
    assert again == first
