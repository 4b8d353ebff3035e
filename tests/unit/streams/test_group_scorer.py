"""The open groups of one partition: complete groups, timeouts in event time, late and
unscorable members dead-lettered whole — as the replay decides — and a settled group's
arrivals turned away until and after its mark is committed."""

from __future__ import annotations

import math
from datetime import timedelta

import numpy as np

from schemas.pipeline_file import RewardConfig
from schemas.records import ProcessSignal, QueueEntry
from streams.pipeline_config import PipelineConfig
from streams.replay.pipeline import process_log
from streams.stage import rollout_letters
from streams.stage.assembler import RolloutAssembly
from streams.stage.group_scorer import GroupScorer, Member
from streams.stage.message_size import MESSAGE_LIMIT
from streams.stage.settled_groups import SettledGroups
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


def member(events) -> Member:
    """The rollout as its partition's open rollouts hand it over, ended."""
    assembly = RolloutAssembly(events[0].rollout_id)
    for event in events:
        assembly.add(event)
    return Member(assembly, assembly.assemble())


def committed(groups: GroupScorer, group: str) -> set[str]:
    """The group's transaction: the rollouts let go with it and after it."""
    return groups.writing(group) | groups.written(group)


def test_a_complete_group_is_scored_once_and_its_arrivals_turned_away_before_and_after_commit():
    groups = scorer()
    a, b = rollout("a", "g", 2, 0, 0.0, 3.0), rollout("b", "g", 2, 1, 0.0, 4.0, outcome=0.0)
    assert groups.settlement_for("g", member(a)) is None and groups.open_groups == 1
    assert (
        groups.settlement_for("w", None, T0) is None
    )  # a check of a group unknown here is nothing
    settled = groups.settlement_for("g", member(b))
    assert settled is not None and not settled.dead and settled.mark is not None
    assert not settled.mark.timed_out and settled.mark.rollouts == {"a", "b"}
    assert [t.rollout_id for t in settled.trajectories] == ["a", "b"]
    assert [m.rollout_id for m in settled.present] == ["a", "b"]
    assert groups.open_groups == 0
    assert (
        groups.settlement_for("g", member(b)) is None
    )  # a copy, while its outputs are on their way
    assert groups.writing("g") == {"a", "b"}  # the floor in its transaction passes them
    assert groups.settlement_for("g", member(b)) is None  # read again before the commit: held still
    late = member(rollout("l", "g", 2, 3, 0.0, 5.0))
    refused = groups.settlement_for("g", late)  # dead-lettered, let go once its letter is sent
    assert refused is not None and refused.released == ["l"] and refused.dead
    assert groups.written("g") == {"b"} and groups.settled.get("g") == settled.mark
    copy = groups.settlement_for("g", member(b))  # after it: let go at once
    assert copy is not None and copy.released == ["b"] and not copy.dead
    assert groups.settlement_for("g", None, T0 + 2 * TIMEOUT) is None
    assert groups.due(T0 + 2 * TIMEOUT) == []
    c = member(rollout("c", "g", 2, 2, 0.0, 5.0))
    extra = groups.settlement_for("g", c)
    assert extra is not None and extra.mark is None and extra.trajectories == []
    assert extra.dead == [(c, "member of a group already scored")] and extra.released == ["c"]


def test_a_timeout_in_event_time_scores_who_ended_by_the_deadline_and_turns_away_the_rest():
    groups = scorer()
    on_time, late = rollout("x", "g", 3, 0, 0.0, 3.0), rollout("y", "g", 3, 1, 0.0, 70.0)
    assert groups.settlement_for("g", member(on_time)) is None
    assert groups.settlement_for("g", member(late)) is None
    before = T0 + TIMEOUT - timedelta(seconds=1)
    assert groups.due(before) == [] and groups.settlement_for("g", None, before) is None
    assert groups.due(T0 + TIMEOUT) == ["g"]
    settled = groups.settlement_for("g", None, T0 + TIMEOUT)
    assert settled is not None and settled.mark is not None and settled.mark.timed_out
    assert [t.rollout_id for t in settled.trajectories] == ["x"]
    assert settled.dead == [(member(late), "rollout y ended after its group's timeout")]
    straggler = member(rollout("z", "g", 3, 2, 0.0, 80.0))
    for _ in range(2):  # settling here, then committed
        turned_away = groups.settlement_for("g", straggler)
        assert turned_away is not None and turned_away.trajectories == []
        assert turned_away.dead == [(straggler, "member of a group scored at its timeout")]
        assert turned_away.released == ["z"]
        assert not groups.settlement_for("g", None, T0 + 2 * TIMEOUT)  # a check turns nothing away
        if groups.settled.get("g") is None:
            assert committed(groups, "g") == {"x", "y"}


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
    groups = scorer()
    for one in (good, inf):
        assert groups.settlement_for("g", member(one)) is None
    settled = groups.settlement_for("g", member(nan))
    assert settled is not None
    assert [t.rollout_id for t in settled.trajectories] == ["ok"]
    reasons = {dead.rollout_id: reason for dead, reason in settled.dead}
    assert "outcome reward inf is not finite" in reasons["inf"]
    assert "process signal nan at step 0 is not finite" in reasons["nan"]
    letter = next(dead for dead, _ in settled.dead if dead.rollout_id == "inf").letter()
    assert rollout_letters.assembly_of(letter).events == inf
    assert all(math.isfinite(c.advantage) for t in settled.trajectories for c in t.calls)
    queue = [(i, QueueEntry(r, "g", 3, T0)) for i, r in enumerate(("ok", "inf", "nan"))]
    config = PipelineConfig(rewards=RewardConfig(speed_weight=0.0), window=None)
    replay = process_log([*good, *inf, *nan], queue, [], config)
    assert replay.trajectories == settled.trajectories
    assert replay.stats["rollouts_rejected"] == 2


def test_a_trajectory_too_large_for_a_message_is_dead_lettered_whole():
    """Each choice of an n > 1 call repeats the prompt in the trajectory, not in its events."""
    events = rollout("wide", "g", 1, 0, 0.0, 2.0, calls=1, n=2)
    prompt = np.zeros(MESSAGE_LIMIT // 4 * 2 // 3, dtype=np.int32)
    events[1] = env("wide", model_request(call_id="wide-c0", n=2, prompt_token_ids=prompt), 0.1)
    wide = member(events)
    assert rollout_letters.oversize("wide", len(wide.letter())) is None
    settled = scorer().settlement_for("g", wide)
    assert settled is not None and settled.trajectories == []
    [(dead, reason)] = settled.dead
    assert dead == wide and "rollout wide's trajectory is" in reason and "not sent" in reason
    replay = process_log(events, [(0, QueueEntry("wide", "g", 1, T0))], [], PipelineConfig())
    assert replay.samples == [] and replay.stats["rollouts_rejected"] == 1


def test_a_member_ending_after_the_deadline_is_late_whether_or_not_the_horizon_passed_first():
    """Both orders a worker may see: the last member before any check past the deadline, or
    after it. Either way the group times out at its deadline and the replay agrees (a CI run
    scored the whole group when the member happened to come first; the replay did too)."""
    on_time = [rollout(r, "g", 3, i, 0.0, 3.0 + i) for i, r in enumerate("ab")]
    late = rollout("c", "g", 3, 2, 0.0, 65.0)
    outcomes = []
    for tick_first in (False, True):
        groups = scorer()
        for one in on_time:
            assert groups.settlement_for("g", member(one)) is None
        if tick_first:
            settled = groups.settlement_for("g", None, T0 + TIMEOUT)
            turned_away = groups.settlement_for("g", member(late))
            assert turned_away.dead == [(member(late), "member of a group scored at its timeout")]
        else:
            settled = groups.settlement_for("g", member(late))
            assert settled.dead == [(member(late), "rollout c ended after its group's timeout")]
        assert settled.mark.timed_out and settled.trajectories[0].group_completed_ts == T0 + TIMEOUT
        outcomes.append(settled.trajectories)
    assert outcomes[0] == outcomes[1]
    queue = [(i, QueueEntry(r, "g", 3, T0)) for i, r in enumerate("abc")]
    config = PipelineConfig(rewards=RewardConfig(speed_weight=0.0), group_timeout_s=60.0)
    replay = process_log([e for r in (*on_time, late) for e in r], queue, [], config)
    assert replay.trajectories == outcomes[0] and replay.stats["late_members"] == 1


def test_scored_through_stops_below_open_groups_and_trajectories_not_yet_committed():
    """The claim the sequencer relies on (``streams.event_time.scored_through``): every trajectory
    of the partition completed before it has been committed."""
    groups = scorer()
    horizon = T0 + timedelta(seconds=100)
    assert groups.scored_through(horizon) == horizon + timedelta(microseconds=1)
    assert groups.settlement_for("open", member(rollout("o", "open", 2, 0, 50.0, 52.0))) is None
    first_end = T0 + timedelta(seconds=52)
    assert groups.scored_through(horizon) == first_end
    assert groups.scored_through(first_end - timedelta(seconds=10)) == first_end - timedelta(
        seconds=10, microseconds=-1
    )
    a, b = rollout("a", "g", 2, 1, 10.0, 20.0), rollout("b", "g", 2, 2, 10.0, 30.0)
    groups.settlement_for("g", member(a))
    settled = groups.settlement_for("g", member(b))
    assert settled is not None and settled.trajectories
    completed = T0 + timedelta(seconds=30)
    assert groups.scored_through(horizon) == completed  # settled, not committed
    groups.writing("g")
    assert groups.scored_through(horizon) == completed  # in a transaction not committed yet
    groups.written("g")
    assert groups.scored_through(horizon) == first_end  # the open group again


def test_a_member_that_started_earlier_moves_the_deadline_back_and_the_claim_held_below_it():
    """B (started 20 s, ended 25 s) arrives first: the group's deadline is 80 s as it stands.
    A started at 10 s and ends at 75 s, after the true deadline (70 s): the group times out
    at 70 s, B scored. A claim at the deadline as it stood (80 s) would have been false."""
    groups = scorer()
    b_member, a_member = rollout("b", "g", 2, 1, 20.0, 25.0), rollout("a", "g", 2, 0, 10.0, 75.0)
    assert groups.settlement_for("g", member(b_member)) is None
    claim = groups.scored_through(T0 + timedelta(seconds=72))
    settled = groups.settlement_for("g", member(a_member))
    assert settled is not None and settled.mark is not None and settled.mark.timed_out
    (scored,) = settled.trajectories
    assert scored.group_completed_ts == T0 + timedelta(seconds=70)
    assert claim <= scored.group_completed_ts


def test_a_group_whose_members_were_all_rejected_does_not_hold_the_claim():
    groups = scorer()
    horizon = T0 + timedelta(seconds=100)
    nan_outcome = rollout("n", "g", 1, 0, 0.0, 5.0, outcome=math.nan)
    settled = groups.settlement_for("g", member(nan_outcome))
    assert settled is not None and not settled.trajectories and settled.dead
    assert groups.scored_through(horizon) == horizon + timedelta(microseconds=1)


def test_idle_until_a_group_is_due_or_a_settled_one_unwritten():
    groups = scorer()
    groups.settlement_for("g", member(rollout("a", "g", 2, 0, 0.0, 3.0)))
    due = T0 + TIMEOUT
    assert groups.idle(due - timedelta(seconds=1))  # open, but not due yet
    assert not groups.idle(due)  # due, not checked
    settled = groups.settlement_for("g", None, due)  # the check
    assert settled is not None and settled.trajectories
    assert not groups.idle(due)  # its trajectories on their way
    committed(groups, "g")
    assert groups.idle(due)
