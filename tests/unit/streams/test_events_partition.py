"""One forge.events partition in one stage: events in, settled groups out, and a floor that
never passes a member of a group not committed — so reading the partition again from it
settles every such group as before, and a committed group's mark turns its copies away."""

from __future__ import annotations

from datetime import timedelta

from infra.partitioner import partition_of_key
from schemas.pipeline_file import RewardConfig
from schemas.records import QueueEntry
from streams.pipeline_config import PipelineConfig
from streams.replay.pipeline import process_log
from streams.stage.events_partition import REKEY_COMMAND, EventsPartition, Outputs, misplaced
from streams.stage.settled_groups import SettledGroups
from tests.builders import T0
from tests.unit.streams.test_open_rollouts import interleaved
from tests.unit.streams.test_pipeline import rollout

TIMEOUT = timedelta(seconds=60)
CONFIG = PipelineConfig(rewards=RewardConfig(speed_weight=0.0), window=None,
                        group_timeout_s=TIMEOUT.total_seconds())  # fmt: skip


def partition(settled: SettledGroups | None = None) -> EventsPartition:
    return EventsPartition(CONFIG, 2 * TIMEOUT, settled or SettledGroups(3 * TIMEOUT))


def read(work: EventsPartition, log, start: int = 0, stop: int | None = None) -> Outputs:
    out = Outputs()
    for offset in range(start, len(log) if stop is None else stop):
        got = work.add(offset, log[offset])
        out.settlements += got.settlements
        out.dead += got.dead
    return out


def test_the_floor_holds_every_member_until_the_group_is_committed():
    a, b = rollout("a", "g", 2, 0, 0.0, 3.0), rollout("b", "g", 2, 1, 1.0, 4.0)
    h = rollout("h", "h", 1, 2, 2.0, 2.5)
    log = interleaved(a, b, h)
    work = partition()
    out = read(work, log)
    assert [s.group for s in out.settlements] == ["h", "g"]
    assert work.floor() == 0  # a started first, its group not committed
    work.writing("h")
    work.written("h")
    assert work.floor() == 0
    work.writing("g")  # the transaction's floor passes g's members...
    assert work.floor() == len(log)
    work.written("g")  # ...and commits with them
    assert work.floor() == len(log)


def test_a_late_member_that_started_first_holds_the_floor_until_its_group_commits():
    """It set the group's deadline: let go before the group's commit, a restart would settle
    the group without it, at a later deadline."""
    late, on_time = rollout("y", "g", 2, 0, 0.0, 70.0), rollout("x", "g", 2, 1, 5.0, 8.0)
    later = rollout("z", "k", 1, 2, 80.0, 81.0)
    log = interleaved(late, on_time, later)
    work = partition()
    out = read(work, log)
    [group] = [s for s in out.settlements if s.group == "g"]
    assert group.mark.timed_out and [t.rollout_id for t in group.trajectories] == ["x"]
    [dead] = out.dead
    assert dead.key == b"g" and dead.offset == 0 and "after its group's timeout" in dead.reason
    assert work.floor() == 0


def test_read_again_from_the_floor_the_same_groups_settle_and_committed_marks_end_them():
    """Killed mid-way: one group committed, one settled and not, one open. The next owner
    loads the committed marks, reads from the committed floor, and settles the rest as the
    first owner did; the committed group's members read again are let go, not scored."""
    a, b = rollout("a", "g", 2, 0, 0.0, 3.0), rollout("b", "g", 2, 1, 0.5, 4.0)
    c, d = rollout("c", "k", 2, 2, 1.0, 5.0), rollout("d", "k", 2, 3, 1.5, 6.0)
    e, f = rollout("e", "m", 2, 4, 2.0, 7.0), rollout("f", "m", 2, 5, 2.5, 30.0)
    log = interleaved(a, b, c, d, e, f)
    first = partition()
    out = read(first, log, stop=log.index(f[-1]))
    g_settled, k_settled = out.settlements
    first.writing("g")
    committed_floor = first.floor()
    first.written("g")
    assert committed_floor == log.index(c[0])
    marks = SettledGroups(3 * TIMEOUT)
    marks.add("g", g_settled.mark)
    again = partition(marks)
    rerun = read(again, log, start=0)  # reading from before the floor changes nothing either
    assert [s.group for s in rerun.settlements] == ["k", "m"]
    assert rerun.settlements[0].trajectories == k_settled.trajectories
    assert not rerun.dead
    members = zip("abcdef", "ggkkmm", strict=True)
    queue = [(i, QueueEntry(r, g, 2, T0)) for i, (r, g) in enumerate(members)]
    whole = process_log(log, queue, [], CONFIG)
    live = [t for s in (g_settled, *rerun.settlements) for t in s.trajectories]
    assert sorted(live, key=lambda t: t.rollout_id) == whole.trajectories


def test_a_rollout_never_ended_is_dead_lettered_by_its_id_and_let_go():
    stuck = rollout("s", "g", 2, 0, 0.0, 1.0)[:-1]
    later = rollout("l", "h", 1, 1, 200.0, 201.0)
    work = partition()
    out = read(work, [*stuck, *later])
    [gone] = out.dead
    assert gone.key == b"s" and gone.offset == 0 and "did not end within 120 s" in gone.reason
    work.writing("h")
    assert work.floor() == 0  # until its letter is acknowledged
    work.release(gone.release)
    assert work.floor() == len(stuck) + len(later)


def test_a_start_off_its_groups_partition_names_the_rewrite():
    [start, *_] = rollout("r", "g7", 2, 0, 0.0, 1.0)
    home = partition_of_key(b"g7", 4)
    assert misplaced(start, home, 4) is None
    reason = misplaced(start, (home + 1) % 4, 4)
    assert reason is not None and REKEY_COMMAND in reason and f"hashes to {home}" in reason
    assert misplaced(start, 0, 1) is None
