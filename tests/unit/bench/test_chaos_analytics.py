"""The chaos run's analytics check: the workers' stores, unioned, against a rebuild of the log."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[3] / "bench" / "chaoslib"))

from chaos_analytics import Tables, compare_analytics


def rollout(rid: str, group: str = "g1", staleness: int = -1, **changed: Any) -> dict[str, Any]:
    row = {
        "rollout_id": rid, "group_id": group, "task_id": "t", "queue_index": int(rid[1:]),
        "status": "finished", "started_at": "2025-01-01T00:00:00+00:00",
        "ended_at": "2025-01-01T00:00:05+00:00", "duration_s": 5.0, "outcome_reward": 1.0,
        "total_reward": 1.5, "num_calls": 1, "prompt_tokens": 10, "completion_tokens": 4,
        "policy_version": 0, "staleness": staleness, "scoring_s": 0.01,
    }  # fmt: skip
    return row | changed


def call(cid: str, rid: str, **changed: Any) -> dict[str, Any]:
    row = {
        "call_id": cid, "rollout_id": rid, "ts": "2025-01-01T00:00:01+00:00",
        "policy_version": 0, "prompt_tokens": 10, "new_prompt_tokens": 10,
        "completion_tokens": 4, "latency_ms": 12.5, "finish_reason": "stop",
        "retokenization_drift": 0, "choice_index": 0, "cached_tokens": 0,
    }  # fmt: skip
    return row | changed


def step(n: int, **changed: Any) -> dict[str, Any]:
    return {"step": n, "policy_version": n, "loss": 0.25, "samples": 4} | changed


def rebuild() -> Tables:
    """Two groups of two; r1, r2 and r3 sequenced (trained), r4 not; two steps."""
    return Tables(
        rollouts=[
            rollout("r1", staleness=0),
            rollout("r2", staleness=1),
            rollout("r3", "g2", staleness=0),
            rollout("r4", "g2"),
        ],
        calls=[call(f"c{i}", f"r{i}") for i in range(1, 5)],
        train_steps=[step(1), step(2)],
    )


TRAINED = ["r1", "r2", "r3"]


def split_live() -> list[Tables]:
    """The rebuild as two workers sink it: worker a scored both groups (staleness unset) and
    sequenced r1; worker b took over, re-scored g1 after a pause (same rows again, another
    scoring time) and sequenced r2 and r3; the steps went to both."""
    a = Tables(
        rollouts=[
            rollout("r1", staleness=0),
            rollout("r2"),
            rollout("r3", "g2"),
            rollout("r4", "g2"),
        ],
        calls=[call(f"c{i}", f"r{i}") for i in range(1, 5)],
        train_steps=[step(1)],
    )
    b = Tables(
        rollouts=[
            rollout("r1", scoring_s=0.5),
            rollout("r2", staleness=1),
            rollout("r3", "g2", staleness=0),
        ],
        calls=[call("c1", "r1"), call("c2", "r2")],
        train_steps=[step(1), step(2)],
    )
    return [a, b]


def test_the_union_of_the_workers_stores_equals_the_rebuild():
    result = compare_analytics(split_live(), rebuild(), TRAINED)
    assert result.passed(late_facts=0), result.failures()
    assert (result.rollouts.live, result.calls.live, result.train_steps.live) == (4, 4, 2)
    assert result.staleness_differs == result.sequenced_one_side == 0
    check = result.check(late_facts=0)
    assert check.passed and "rollouts 4/4; calls 4/4; steps 2/2" in check.detail


def test_a_row_lost_from_every_store_fails_the_check_and_is_named():
    a, b = split_live()
    a.rollouts.pop()  # r4, never sequenced: no other store has it
    a.calls.pop(2)  # c3
    b.train_steps.pop()  # step 2
    result = compare_analytics([a, b], rebuild(), TRAINED)
    assert not result.passed(late_facts=5)
    assert (result.rollouts.missing, result.calls.missing) == (["r4"], ["c3"])
    assert result.train_steps.missing == ["2"]
    assert "analytics rollouts: r4 not live" in result.failures()
    assert "rollouts 3/4 (missing 1)" in result.check(5).detail


def test_other_content_or_a_row_the_rebuild_lacks_fails():
    a, b = split_live()
    b.rollouts[1] = rollout("r2", staleness=1, total_reward=0.5)
    b.calls[0] = call("c1", "r1", completion_tokens=5)
    a.train_steps[0] = step(1, loss=0.3)
    a.rollouts.append(rollout("r9", "g9"))
    result = compare_analytics([a, b], rebuild(), TRAINED)
    assert not result.passed(late_facts=5)
    assert result.rollouts.changed == ["r2"] and result.rollouts.extra == ["r9"]
    assert (result.calls.changed, result.train_steps.changed) == (["c1"], ["1"])


def test_a_nan_is_equal_to_the_rebuilt_nan():
    a, b = split_live()
    b.train_steps[1] = step(2, loss=float("nan"))
    built = rebuild()
    built.train_steps[1] = step(2, loss=float("nan"))
    assert compare_analytics([a, b], built, TRAINED).passed(late_facts=0)


def test_a_staleness_other_than_the_replays_is_counted_and_needs_a_late_fact():
    a, b = split_live()
    b.rollouts[2] = rollout("r3", "g2", staleness=2)
    result = compare_analytics([a, b], rebuild(), TRAINED)
    assert result.staleness_differs == 1 and result.rollouts.equal
    assert not result.passed(late_facts=0)
    assert result.passed(late_facts=3)
    assert "1 differ from the replay (3 facts came late)" in result.check(3).detail


def test_staleness_is_set_live_exactly_for_forge_trains_samples():
    a, b = split_live()
    b.rollouts[2] = rollout("r3", "g2")  # the sequencer's update lost
    a.rollouts[3] = rollout("r4", "g2", staleness=0)  # a row sequenced, not in forge.train
    result = compare_analytics([a, b], rebuild(), TRAINED)
    assert result.staleness_unrecorded == ["r3"] and result.staleness_untrained == ["r4"]
    assert result.sequenced_one_side == 2 and not result.passed(late_facts=9)


def test_two_staleness_values_live_conflict():
    a, b = split_live()
    a.rollouts[1] = rollout("r2", staleness=0)
    result = compare_analytics([a, b], rebuild(), TRAINED)
    assert result.staleness_conflicts == ["r2"] and not result.passed(late_facts=9)


def test_a_group_missing_live_fails_with_its_rollouts_and_calls_named():
    """The workers time groups out at one horizon, the replay's once the log is quiet: a group
    the rebuild scored and no worker did (g2, its sample r3 trained in the replay only) fails;
    its calls are owed, not counted as calls of unscored rollouts."""
    a, b = split_live()
    for store in (a, b):
        store.rollouts[:] = [r for r in store.rollouts if r["group_id"] != "g2"]
        store.calls[:] = [c for c in store.calls if c["rollout_id"] in ("r1", "r2")]
    result = compare_analytics([a, b], rebuild(), ["r1", "r2"])
    assert not result.passed(late_facts=9)
    assert (result.rollouts.missing, result.calls.missing) == (["r3", "r4"], ["c3", "c4"])
    assert result.calls_unscored == 0


def test_calls_of_rollouts_no_table_holds_are_rebuilt_only_and_counted():
    """A late member (or an oversize or never-ended rollout) has no rollout row; the replay
    writes its calls, the live worker does not. A call of a scored rollout is still owed."""
    built = rebuild()
    built.calls.append(call("c5", "r5"))
    result = compare_analytics(split_live(), built, TRAINED)
    assert result.passed(late_facts=0) and result.calls_unscored == 1
    a, b = split_live()
    a.calls.append(call("c5", "r5"))  # a rejected member: sunk live, rebuilt too
    assert compare_analytics([a, b], built, TRAINED).calls_unscored == 0
    built.calls.append(call("c6", "r1"))
    assert compare_analytics(split_live(), built, TRAINED).calls.missing == ["c6"]
