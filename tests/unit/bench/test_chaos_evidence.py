"""A chaos run's evidence for a sample forge.train lacks: where its rollout went in the log."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[3] / "bench" / "chaoslib"))

from chaos_evidence import (
    PlacedEvent,
    SeenTrajectory,
    explain_missing,
    missing_rollouts,
)

from schemas.records import (
    DeadLetter,
    Envelope,
    RolloutFinished,
    RolloutStarted,
    TrainSample,
    Trajectory,
)

T0 = datetime(2026, 12, 1, 6, 0, 0, tzinfo=UTC)


def trajectory(rid: str, group: str = "g1") -> Trajectory:
    return Trajectory(rid, group, "task", int(rid[1:]), "finished", T0, T0, [],
                      group_completed_ts=T0 + timedelta(seconds=9))  # fmt: skip


def placed(offset: int, rid: str, seconds: float, payload: object) -> PlacedEvent:
    at = T0 + timedelta(seconds=seconds)
    return PlacedEvent(2, offset, Envelope(f"e{offset}", rid, at, "test", payload))  # type: ignore[arg-type]


def letter(reason: str, key: bytes | None = None, value: bytes | None = None) -> DeadLetter:
    return DeadLetter("forge.x", 1, 7, reason, "worker", T0, key=key, value=value)


REPLAY = [TrainSample("s1", 1, trajectory("r1")), TrainSample("s2", 2, trajectory("r2"))]
EVENTS = [
    placed(10, "r1", 0.0, RolloutStarted("task", "g1", 2, 0)),
    placed(11, "r2", 0.5, RolloutStarted("task", "g1", 2, 0)),
    placed(14, "r1", 3.25, RolloutFinished("finished", 1.0)),
]


def test_a_missing_rollout_is_traced_through_events_scorings_and_dead_letters():
    scored = [SeenTrajectory(T0.timestamp() + 12, trajectory("r2"))]
    dead = [
        letter("rollout r1 ended after its group's timeout"),
        letter("bundle too large", key=b"g1"),
        letter("undecodable", value=b"..r1.."),
        letter("some other rollout", key=b"r9"),
    ]
    lines = explain_missing(["s1"], REPLAY, EVENTS, scored, dead)
    assert lines[0] == "s1: rollout r1, group g1"
    assert lines[1] == (
        "  forge.events: 2 events on partition [2] offsets 10-14, event time "
        "06:00:00.000-06:00:03.250 (ROLLOUT_STARTED ROLLOUT_FINISHED)"
    )
    assert lines[2] == (
        "  forge.trajectories: r2 (finished, queue 2) seen 06:00:12.000, group completed "
        "06:00:09.000"
    )
    by = "from forge.x p1@7 by worker at 06:00:00.000"
    assert lines[3:] == [
        f'  forge.dlq: "rollout r1 ended after its group\'s timeout" {by}',
        f"  forge.dlq: 'bundle too large' {by}",
        f"  forge.dlq: 'undecodable' {by}",
    ]


def test_a_rollout_absent_everywhere_says_so():
    lines = explain_missing(["s2"], REPLAY, [], [], [letter("some other rollout", key=b"r9")])
    assert lines == [
        "s2: rollout r2, group g1",
        "  forge.events: none",
        "  forge.trajectories: its group never scored live",
        "  forge.dlq: nothing names it or its group",
    ]


def test_samples_not_in_the_replay_are_skipped_and_names_cover_rollout_and_group():
    assert explain_missing(["s9"], REPLAY, EVENTS, [], []) == []
    assert missing_rollouts(["s1", "s9"], REPLAY) == {"r1", "g1"}
