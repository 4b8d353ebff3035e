"""The scorer of one partition: open groups in memory, complete groups, timeouts in event
time, late and unscorable members dead-lettered with their bundles — as the replay decides —
and the commit floor held until a settled group's mark is acknowledged."""

from __future__ import annotations

import math
from datetime import timedelta

import numpy as np
import pytest

from schemas import codec
from schemas.pipeline_file import RewardConfig
from schemas.records import ProcessSignal, QueueEntry
from streams import bundles
from streams.group_scorer import GroupScorer
from streams.message_size import MESSAGE_LIMIT
from streams.pipeline import PipelineConfig, process_log
from streams.settled_groups import SettledGroups
from tests.builders import T0, model_request
from tests.unit.streams.test_pipeline import env, rollout

TIMEOUT = timedelta(seconds=60)


def scorer(settled: SettledGroups | None = None) -> GroupScorer:
    return GroupScorer(
        PipelineConfig(
            rewards=RewardConfig(speed_weight=0.0), group_timeout_s=TIMEOUT.total_seconds()
        ),
        settled or SettledGroups(TIMEOUT),
    )


class Arrivals:
    """Offers arrivals at increasing offsets, as a partition delivers them."""

    def __init__(self, groups: GroupScorer) -> None:
        self.groups, self.offset = groups, 0

    def __call__(self, group: bytes, raw: bytes, horizon=None):
        self.offset += 1
        return self.groups.offer(self.offset, group, raw, horizon)


def bundle(events):
    return bundles.pack(codec.encode(e) for e in events)


def test_a_complete_group_is_scored_once_and_holds_the_floor_until_its_mark_is_acknowledged():
    groups = scorer()
    offer = Arrivals(groups)
    a, b = rollout("a", "g", 2, 0, 0.0, 3.0), rollout("b", "g", 2, 1, 0.0, 4.0, outcome=0.0)
    assert offer(b"g", bundle(a)) is None
    assert groups.floor.floor() == 1 and groups.open_groups == 1  # held at its first member
    assert offer(b"w", b"") is None  # a tick of a group unknown here is nothing
    settled = offer(b"g", bundle(b))
    assert settled is not None and not settled.dead and settled.mark is not None
    assert not settled.mark.timed_out and settled.mark.rollouts == {"a", "b"}
    assert [t.rollout_id for t in settled.trajectories] == ["a", "b"]
    assert [m.rollout_id for m in settled.present] == ["a", "b"]
    assert groups.floor.floor() == 1 and groups.open_groups == 0  # until it is marked
    assert offer(b"g", bundle(b)) is None  # a copy, while its outputs are on their way
    groups.marked(b"g")
    assert groups.floor.floor() == 5 and groups.settled.get(b"g") == settled.mark
    assert offer(b"g", bundle(b)) is None and offer(b"g", b"", T0 + 2 * TIMEOUT) is None
    assert groups.due(T0 + 2 * TIMEOUT) == []
    c = bundle(rollout("c", "g", 2, 2, 0.0, 5.0))
    extra = offer(b"g", c)
    assert extra is not None and extra.mark is None and extra.trajectories == []
    assert extra.dead == [(c, "member of a group already scored")]


def test_a_timeout_in_event_time_scores_who_ended_by_the_deadline_and_turns_away_the_rest():
    groups = scorer()
    offer = Arrivals(groups)
    on_time, late = rollout("x", "g", 3, 0, 0.0, 3.0), rollout("y", "g", 3, 1, 0.0, 70.0)
    assert offer(b"g", bundle(on_time)) is None
    assert offer(b"g", bundle(late)) is None
    before = T0 + TIMEOUT - timedelta(seconds=1)
    assert groups.due(before) == [] and offer(b"g", b"", before) is None
    assert groups.due(T0 + TIMEOUT) == [b"g"]
    settled = offer(b"g", b"", T0 + TIMEOUT)
    assert settled is not None and settled.mark is not None and settled.mark.timed_out
    assert [t.rollout_id for t in settled.trajectories] == ["x"]
    assert settled.dead == [(bundle(late), "rollout y ended after its group's timeout")]
    straggler = bundle(rollout("z", "g", 3, 2, 0.0, 80.0))
    for _ in range(2):  # settling here, then marked
        turned_away = offer(b"g", straggler)
        assert turned_away is not None and turned_away.trajectories == []
        assert turned_away.dead == [(straggler, "member of a group scored at its timeout")]
        assert not offer(b"g", b"", T0 + 2 * TIMEOUT)  # a tick turns nothing away
        groups.marked(b"g")


def test_a_restart_reading_again_from_the_floor_settles_the_same_way_and_a_mark_ends_it():
    """Killed after sending a group's trajectories, before its mark: the floor held its first
    member, so the next owner reads its bundles again and settles it again, the same way;
    once the mark is in the log, what is read again of the group is nothing."""
    a, b = rollout("a", "g", 2, 0, 0.0, 3.0), rollout("b", "g", 2, 1, 0.0, 4.0, outcome=0.0)
    log = [(b"h", bundle(rollout("h", "h", 2, 2, 0.0, 1.0))), (b"g", bundle(a)), (b"g", bundle(b))]
    first = scorer()
    outputs = [first.offer(i, g, raw) for i, (g, raw) in enumerate(log)]
    floor = first.floor.floor()
    assert floor == 0  # group h, still open, holds it
    again = scorer()
    replayed = [again.offer(i, g, raw) for i, (g, raw) in enumerate(log) if i >= floor]
    assert replayed[-1].trajectories == outputs[-1].trajectories
    assert [m.bundle for m in replayed[-1].present] == [m.bundle for m in outputs[-1].present]
    first.marked(b"g")
    settled = SettledGroups(TIMEOUT)
    settled.add(b"g", outputs[-1].mark)
    marked = scorer(settled)
    assert [marked.offer(i, g, raw) for i, (g, raw) in enumerate(log)] == [None, None, None]


def test_a_bad_bundle_raises_and_leaves_the_group_as_it_was():
    groups = scorer()
    offer = Arrivals(groups)
    assert offer(b"g", bundle(rollout("a", "g", 2, 0, 0.0, 3.0))) is None
    with pytest.raises(bundles.BadBundleError):
        offer(b"g", b"garbage")
    assert groups.open_groups == 1 and groups.floor.floor() == 1


def with_signal(events, value):
    """``events`` with their ProcessSignal's value replaced."""
    out = list(events)
    for i, e in enumerate(out):
        if isinstance(e.payload, ProcessSignal):
            signal = ProcessSignal(e.payload.step, e.payload.name, value)
            out[i] = env(e.rollout_id, signal, (e.ts - T0).total_seconds())
    return out


def test_a_non_finite_input_dead_letters_its_rollout_and_the_rest_is_scored_as_the_replay_does():
    good = rollout("ok", "g", 3, 0, 0.0, 2.0, outcome=1.0)
    inf = rollout("inf", "g", 3, 1, 0.0, 3.0, outcome=math.inf)
    nan = with_signal(rollout("nan", "g", 3, 2, 0.0, 4.0), math.nan)
    offer = Arrivals(scorer())
    for member in (good, inf):
        assert offer(b"g", bundle(member)) is None
    settled = offer(b"g", bundle(nan))
    assert settled is not None
    assert [t.rollout_id for t in settled.trajectories] == ["ok"]
    reasons = dict((raw, reason) for raw, reason in settled.dead)
    assert "outcome reward inf is not finite" in reasons[bundle(inf)]
    assert "process signal nan at step 0 is not finite" in reasons[bundle(nan)]
    assert all(math.isfinite(c.advantage) for t in settled.trajectories for c in t.calls)
    queue = [(i, QueueEntry(r, "g", 3, T0)) for i, r in enumerate(("ok", "inf", "nan"))]
    config = PipelineConfig(rewards=RewardConfig(speed_weight=0.0), window=None)
    replay = process_log([*good, *inf, *nan], queue, [], config)
    assert replay.trajectories == settled.trajectories
    assert replay.stats["rollouts_rejected"] == 2


def test_a_trajectory_too_large_for_a_message_is_dead_lettered_with_its_bundle():
    """Each choice of an n > 1 call repeats the prompt in the trajectory, not in the bundle."""
    events = rollout("wide", "g", 1, 0, 0.0, 2.0, calls=1, n=2)
    prompt = np.zeros(MESSAGE_LIMIT // 4 * 2 // 3, dtype=np.int32)
    events[1] = env("wide", model_request(call_id="wide-c0", n=2, prompt_token_ids=prompt), 0.1)
    raw = bundle(events)
    assert bundles.oversize("wide", len(raw)) is None
    settled = scorer().offer(0, b"g", raw)
    assert settled is not None and settled.trajectories == []
    [(dead, reason)] = settled.dead
    assert dead == raw and "rollout wide's trajectory is" in reason and "not sent" in reason
    replay = process_log(events, [(0, QueueEntry("wide", "g", 1, T0))], [], PipelineConfig())
    assert replay.samples == [] and replay.stats["rollouts_rejected"] == 1


def test_a_member_ending_after_the_deadline_is_late_whether_or_not_the_horizon_passed_first():
    """Both orders a worker may see: the last bundle before any tick past the deadline, or
    after it. Either way the group times out at its deadline and the replay agrees (a CI run
    scored the whole group when the bundle happened to come first; the replay did too)."""
    on_time = [rollout(r, "g", 3, i, 0.0, 3.0 + i) for i, r in enumerate("ab")]
    late = rollout("c", "g", 3, 2, 0.0, 65.0)
    outcomes = []
    for tick_first in (False, True):
        offer = Arrivals(scorer())
        for member in on_time:
            assert offer(b"g", bundle(member)) is None
        if tick_first:
            settled = offer(b"g", b"", T0 + TIMEOUT)
            turned_away = offer(b"g", bundle(late))
            assert turned_away.dead == [(bundle(late), "member of a group scored at its timeout")]
        else:
            settled = offer(b"g", bundle(late))
            assert settled.dead == [(bundle(late), "rollout c ended after its group's timeout")]
        assert settled.mark.timed_out and settled.trajectories[0].group_completed_ts == T0 + TIMEOUT
        outcomes.append(settled.trajectories)
    assert outcomes[0] == outcomes[1]
    queue = [(i, QueueEntry(r, "g", 3, T0)) for i, r in enumerate("abc")]
    config = PipelineConfig(rewards=RewardConfig(speed_weight=0.0), group_timeout_s=60.0)
    replay = process_log([e for r in (*on_time, late) for e in r], queue, [], config)
    assert replay.trajectories == outcomes[0] and replay.stats["late_members"] == 1


def test_scored_through_stops_below_open_groups_and_trajectories_not_yet_acknowledged():
    """The claim the sequencer relies on (``streams.scored_through``): every trajectory of the
    partition completed before it has been acknowledged."""
    groups = scorer()
    offer = Arrivals(groups)
    horizon = T0 + timedelta(seconds=100)
    assert groups.scored_through(horizon) == horizon + timedelta(microseconds=1)
    assert offer(b"open", bundle(rollout("o", "open", 2, 0, 50.0, 52.0))) is None
    first_end = T0 + timedelta(seconds=52)
    assert groups.scored_through(horizon) == first_end
    assert groups.scored_through(first_end - timedelta(seconds=10)) == first_end - timedelta(
        seconds=10, microseconds=-1
    )
    a, b = rollout("a", "g", 2, 1, 10.0, 20.0), rollout("b", "g", 2, 2, 10.0, 30.0)
    offer(b"g", bundle(a))
    settled = offer(b"g", bundle(b))
    assert settled is not None and settled.trajectories
    completed = T0 + timedelta(seconds=30)
    assert groups.scored_through(horizon) == completed  # sent, not acknowledged
    groups.written(b"g")
    assert groups.scored_through(horizon) == first_end  # the open group again
    groups.marked(b"g")
    assert groups.scored_through(horizon) == first_end


def test_a_member_that_started_earlier_moves_the_deadline_back_and_the_claim_held_below_it():
    """B (started 20 s, ended 25 s) arrives first: the group's deadline is 80 s as it stands.
    A started at 10 s and ends at 75 s, after the true deadline (70 s): the group times out
    at 70 s, B scored. A claim at the deadline as it stood (80 s) would have been false."""
    groups = scorer()
    offer = Arrivals(groups)
    b_member, a_member = rollout("b", "g", 2, 1, 20.0, 25.0), rollout("a", "g", 2, 0, 10.0, 75.0)
    assert offer(b"g", bundle(b_member)) is None
    claim = groups.scored_through(T0 + timedelta(seconds=72))
    settled = offer(b"g", bundle(a_member))
    assert settled is not None and settled.mark is not None and settled.mark.timed_out
    (scored,) = settled.trajectories
    assert scored.group_completed_ts == T0 + timedelta(seconds=70)
    assert claim <= scored.group_completed_ts


def test_a_group_whose_members_were_all_rejected_does_not_hold_the_claim():
    groups = scorer()
    offer = Arrivals(groups)
    horizon = T0 + timedelta(seconds=100)
    nan_outcome = rollout("n", "g", 1, 0, 0.0, 5.0, outcome=math.nan)
    settled = offer(b"g", bundle(nan_outcome))
    assert settled is not None and not settled.trajectories and settled.dead
    assert groups.scored_through(horizon) == horizon + timedelta(microseconds=1)


def test_idle_until_a_group_is_due_or_a_settled_one_unwritten():
    groups = scorer()
    offer = Arrivals(groups)
    offer(b"g", bundle(rollout("a", "g", 2, 0, 0.0, 3.0)))
    due = T0 + TIMEOUT
    assert groups.idle(due - timedelta(seconds=1))  # open, but not due yet
    assert not groups.idle(due)  # due, not ticked
    settled = offer(b"g", b"", due)  # the tick
    assert settled is not None and settled.trajectories
    assert not groups.idle(due)  # its trajectories on their way
    groups.written(b"g")
    assert groups.idle(due)
