"""The scorer's rule over its tables (dicts here): complete groups, timeouts in event time,
late and unscorable members dead-lettered with their bundles — as the replay decides."""

from __future__ import annotations

import math
from datetime import timedelta

import numpy as np

from schemas import codec
from schemas.records import ProcessSignal, QueueEntry
from streams import bundles
from streams.groups import GroupScorer
from streams.message_size import MESSAGE_LIMIT
from streams.pipeline import PipelineConfig, process_log
from streams.rewards import RewardConfig
from streams.tables import GroupTables
from tests.builders import T0, model_request
from tests.unit.streams.test_pipeline import env, rollout

TIMEOUT = timedelta(seconds=60)


def scorer():
    tables = {}, {}, {}
    return GroupScorer(GroupTables(*tables), TIMEOUT, RewardConfig(speed_weight=0.0)), tables


def bundle(events):
    return bundles.pack(codec.encode(e) for e in events)


def test_a_complete_group_is_scored_once_all_members_arrived_and_then_forgotten():
    groups, (members, stored, scored) = scorer()
    a, b = rollout("a", "g", 2, 0, 0.0, 3.0), rollout("b", "g", 2, 1, 0.0, 4.0, outcome=0.0)
    assert groups.offer(b"g", bundle(a)) is None
    assert members == {b"g": b"a"} and len(stored) == 1
    settled = groups.offer(b"g", bundle(b))
    assert settled is not None and not settled.dead and not settled.timed_out
    assert [t.rollout_id for t in settled.trajectories] == ["a", "b"]
    assert [m.rollout_id for m in settled.present] == ["a", "b"]
    assert members and stored  # until the settlement was sent on
    groups.close(b"g", settled)
    assert members and stored  # and until the message that settled it is committed
    assert (
        groups.offer(b"g", bundle(b)) is None and groups.offer(b"g", b"", T0 + 2 * TIMEOUT) is None
    )
    assert groups.due(T0 + 2 * TIMEOUT) == []
    extra = groups.offer(b"g", bundle(rollout("c", "g", 2, 2, 0.0, 5.0)))
    assert extra is not None and extra.dead[0][1] == "member of a group already scored"
    groups.close(b"g", extra)  # turned away: changes nothing
    groups.forget(b"g")
    assert members == {} and stored == {} and scored == {}


def test_a_timeout_in_event_time_scores_who_ended_by_the_deadline_and_turns_away_the_rest():
    groups, (members, stored, scored) = scorer()
    on_time, late = rollout("x", "g", 3, 0, 0.0, 3.0), rollout("y", "g", 3, 1, 0.0, 70.0)
    assert groups.offer(b"g", bundle(on_time)) is None
    assert groups.offer(b"g", bundle(late)) is None
    before = T0 + TIMEOUT - timedelta(seconds=1)
    assert groups.due(before) == [] and groups.offer(b"g", b"", before) is None
    assert groups.due(T0 + TIMEOUT) == [b"g"]
    settled = groups.offer(b"g", b"", T0 + TIMEOUT)
    assert settled is not None and settled.timed_out
    assert [t.rollout_id for t in settled.trajectories] == ["x"]
    assert settled.dead == [(bundle(late), "rollout y ended after its group's timeout")]
    groups.close(b"g", settled)
    straggler = bundle(rollout("z", "g", 3, 2, 0.0, 80.0))
    for _ in range(2):  # closed here, then forgotten and marked
        turned_away = groups.offer(b"g", straggler)
        assert turned_away is not None and turned_away.trajectories == []
        assert turned_away.dead == [(straggler, "member of a group scored at its timeout")]
        assert not groups.offer(b"g", b"", T0 + 2 * TIMEOUT)  # a tick turns nothing away
        groups.forget(b"g")
        assert members == {} and stored == {} and scored == {b"g": b"1"}


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
    groups, _ = scorer()
    for member in (good, inf):
        assert groups.offer(b"g", bundle(member)) is None
    settled = groups.offer(b"g", bundle(nan))
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
    groups, _ = scorer()
    settled = groups.offer(b"g", raw)
    assert settled is not None and settled.trajectories == []
    [(dead, reason)] = settled.dead
    assert dead == raw and "rollout wide's trajectory is" in reason and "not sent" in reason
    replay = process_log(events, [(0, QueueEntry("wide", "g", 1, T0))], [], PipelineConfig())
    assert replay.samples == [] and replay.stats["rollouts_rejected"] == 1


def test_a_group_listing_a_member_without_its_bundle_is_left_for_the_next_timeout_check():
    """A worker resumed after a pause past its session: its timer ran while the tables were
    being recovered, the member list ahead of the bundles (a chaos run crashed here)."""
    groups, (members, stored, _) = scorer()
    assert groups.offer(b"g", bundle(rollout("x", "g", 3, 0, 0.0, 3.0))) is None
    assert groups.offer(b"h", bundle(rollout("z", "h", 3, 1, 0.0, 3.0))) is None
    groups.tables._decoded.clear()  # a fresh worker's view: the tables only
    members[b"g"] = b"x\ny"  # y listed, its bundle not there (yet)
    assert groups.due(T0 + TIMEOUT) == [b"h"]
    assert len(stored) == 2


def test_a_copy_of_a_member_with_less_in_it_never_replaces_the_stored_one():
    """A rollout's end read again after a kill -9, assembled from a changelog that had lost
    one of its calls: the copy arrives after the full bundle (a CI run trained the copy)."""
    a, b = rollout("a", "g", 2, 0, 0.0, 3.0), rollout("b", "g", 2, 1, 0.0, 4.0, outcome=0.0)
    without_first_call = [a[0], *a[3:]]
    reference, _ = scorer()
    reference.offer(b"g", bundle(a))
    expected = reference.offer(b"g", bundle(b))
    for order in ([a, without_first_call], [without_first_call, a]):
        groups, (_, stored, _) = scorer()
        assert [groups.offer(b"g", bundle(copy)) for copy in order] == [None, None]
        assert stored == {b"g\x00a": bundle(a)}  # the fuller one, whichever came first
        settled = groups.offer(b"g", bundle(b))
        assert settled is not None and settled.trajectories == expected.trajectories


def test_a_restart_before_the_commit_settles_the_group_again_the_same_way():
    """Killed after sending a settlement on, before committing the message that settled it:
    the tables still hold the group, so that message read again settles it again, its
    trajectories and its members' calls (a chaos run lost those rows when the group's tables
    were already gone)."""
    a, b = rollout("a", "g", 2, 0, 0.0, 3.0), rollout("b", "g", 2, 1, 0.0, 4.0, outcome=0.0)
    groups, tables = scorer()
    groups.offer(b"g", bundle(a))
    first = groups.offer(b"g", bundle(b))
    groups.close(b"g", first)
    restarted = GroupScorer(GroupTables(*tables), TIMEOUT, RewardConfig(speed_weight=0.0))
    again = restarted.offer(b"g", bundle(b))
    assert again is not None and again.trajectories == first.trajectories
    assert [m.bundle for m in again.present] == [m.bundle for m in first.present]


def test_a_member_ending_after_the_deadline_is_late_whether_or_not_the_horizon_passed_first():
    """Both orders a worker may see: the last bundle before any tick past the deadline, or
    after it. Either way the group times out at its deadline and the replay agrees (a CI run
    scored the whole group when the bundle happened to come first; the replay did too)."""
    on_time = [rollout(r, "g", 3, i, 0.0, 3.0 + i) for i, r in enumerate("ab")]
    late = rollout("c", "g", 3, 2, 0.0, 65.0)
    outcomes = []
    for tick_first in (False, True):
        groups, _ = scorer()
        for member in on_time:
            assert groups.offer(b"g", bundle(member)) is None
        if tick_first:
            settled = groups.offer(b"g", b"", T0 + TIMEOUT)
            groups.close(b"g", settled)
            turned_away = groups.offer(b"g", bundle(late))
            assert turned_away.dead == [(bundle(late), "member of a group scored at its timeout")]
        else:
            settled = groups.offer(b"g", bundle(late))
            assert settled.dead == [(bundle(late), "rollout c ended after its group's timeout")]
        assert settled.timed_out and settled.trajectories[0].group_completed_ts == T0 + TIMEOUT
        outcomes.append(settled.trajectories)
    assert outcomes[0] == outcomes[1]
    queue = [(i, QueueEntry(r, "g", 3, T0)) for i, r in enumerate("abc")]
    config = PipelineConfig(rewards=RewardConfig(speed_weight=0.0), group_timeout_s=60.0)
    replay = process_log([e for r in (*on_time, late) for e in r], queue, [], config)
    assert replay.trajectories == outcomes[0] and replay.stats["late_members"] == 1
