"""The assembler's per-rollout index follows the same rules as the assembly it feeds."""

from __future__ import annotations

from schemas import codec
from streams import bundles
from streams.assembler import RolloutAssembly
from tests.unit.streams.test_pipeline import rollout


def replay_index(events):
    """Admitted events' raw messages and the final index, as the live assembler keeps them."""
    index, admitted = bundles.RolloutIndex(), []
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
    assert bundles.RolloutIndex.from_bytes(index.to_bytes()) == index
    assert bundles.RolloutIndex.from_bytes(b"") == bundles.RolloutIndex()
