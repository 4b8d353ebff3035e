"""The cost ledger on real chDB: a few hand-made rows through the sink's row builders, each
report's figures against the values worked out by hand below."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest

from infra.analytics import (
    CALL_ADDED_COLUMNS,
    MIGRATIONS,
    ROLLOUT_ADDED_COLUMNS,
    TABLES,
    analytics_client,
    ensure_tables,
    query_rows,
)
from schemas import codec
from schemas.records import Envelope, TrainStep, Trajectory, TrajectoryCall
from streams.analytics.reports import (
    COST_BY_DOMAIN,
    COST_BY_FATE,
    COSTS,
    DOMAINS_SQL,
    GROUP_COSTS,
    ROLLOUT_COSTS,
    ROLLOUT_TIME,
    STEP_COSTS,
    cost_reports,
    costs_over_time,
)
from streams.analytics.sinks import (
    CALL_COLUMNS,
    ROLLOUT_COLUMNS,
    call_rows,
    insert_calls,
    insert_rollouts,
    insert_train_steps,
    rollout_row,
)
from streams.analytics.sql_endpoint import SqlEndpoint, session_settings
from streams.pipeline_config import PipelineConfig
from streams.stage.assembler import AssembledRollout
from streams.stage.scoring import score_trajectories
from tests.builders import envelope, logprobs, model_request, model_response, tokens

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def naive(seconds: float) -> datetime:
    """As clickhouse-connect returns a UTC time."""
    return at(seconds).replace(tzinfo=None)


def rollout(rid: str, group: str, status: str, start: float, end: float, staleness: int,
            scoring_s: float, domain: str = "default", outcome: float | None = None,
            total: float = 0.0, spread: float = 0.0) -> list:  # fmt: skip
    trajectory = Trajectory(rid, group, "task", 0, status, at(start), at(end), [], outcome, total,
                            scoring_s=scoring_s, domain=domain,
                            group_reward_spread=spread)  # fmt: skip
    return rollout_row(trajectory, staleness)


def call(rid: str, call_id: str, start: float, latency_ms: float, prompt: int, cached: int,
         *completions: int) -> list[Envelope]:  # fmt: skip
    """A request of ``prompt`` tokens, ``cached`` of them shared with its parent, answered with
    one choice per completion length after ``latency_ms``."""
    request = model_request(prompt - cached, call_id=call_id, prompt_len=prompt,
                            shared_prefix_len=cached, n=len(completions))  # fmt: skip
    answers = [model_response(n, call_id=call_id, choice_index=i, latency_ms=latency_ms)
               for i, n in enumerate(completions)]  # fmt: skip
    return [envelope(request, rid, at(start)),
            *(envelope(a, rid, at(start + latency_ms / 1000)) for a in answers)]  # fmt: skip


def step(n: int, end: float, samples: int, step_time_s: float, wait: float, export: float,
         checkpoint: float) -> TrainStep:  # fmt: skip
    return TrainStep(n, n, 0.1, samples, 100, 80, 1.25, 0.0, 0.5, 1, step_time_s, at(end),
                     wait_data_s=wait, export_s=export, checkpoint_s=checkpoint)  # fmt: skip


# r1 consumed: two calls, the second with n = 2 (its 3 s and its prompt count once), 120 of its
#    150 prompt tokens shared with the first call. Engine 2 + 3 = 5 s, agent 10 - 5 = 5 s.
# r2 aborted (though consumed): engine 1 s, agent 6 - 1 = 5 s.
# r3 never consumed (staleness -1): engine 4 s, agent 40 - 4 = 36 s.
# r4 dropped: calls, no rollout row: engine 2.5 s, no agent time.
# r5 consumed: two concurrent 1.5 s calls in a 2 s rollout: engine 3 s, agent 0 (clamped).
# g1 = {r1, r2} scored in 0.5 s, g2 = {r3, r5} in 0.25 s.
# Steps: update = step_time + export + checkpoint = 3 + 0.5 + 1 = 4.5 and 2 + 0.25 + 0.75 = 3.
# T: first start 0 s to the last record, step 2 at 100 s -> 100 s.
ROLLOUTS = [
    rollout("r1", "g1", "finished", 0, 10, 0, 0.5),
    rollout("r2", "g1", "aborted", 0, 6, 1, 0.5),
    rollout("r3", "g2", "finished", 30, 70, -1, 0.25),
    rollout("r5", "g2", "finished", 60, 62, 2, 0.25),
]
CALLS = [
    *call("r1", "c1", 1, 2000, 100, 0, 20),
    *call("r1", "c2", 4, 3000, 150, 120, 10, 15),
    *call("r2", "c3", 2, 1000, 80, 0, 5),
    *call("r3", "c4", 65, 4000, 60, 0, 30),
    *call("r4", "c5", 50, 2500, 40, 0, 8),
    *call("r5", "c6", 60.2, 1500, 10, 0, 1),
    *call("r5", "c7", 60.2, 1500, 10, 0, 1),
]
STEPS = [step(1, 20, 2, 3.0, 7.0, 0.5, 1.0), step(2, 100, 1, 2.0, 30.0, 0.25, 0.75)]


@contextmanager
def own_database(client) -> Iterator[None]:
    """The client's tables in a new database, until the block ends (one chDB per process:
    the session's store is shared, and its default database is other tests')."""
    (before,) = query_rows(client, "SELECT currentDatabase()")[1][0]
    database = f"costs_{uuid.uuid4().hex[:8]}"
    client.command(f"CREATE DATABASE {database}")
    client.command(f"USE {database}")
    try:
        yield
    finally:
        client.command(f"USE {before}")
        client.command(f"DROP DATABASE {database}")


@pytest.fixture(scope="module")
def ledger(analytics) -> Iterator:
    with own_database(analytics):
        ensure_tables(analytics)
        insert_rollouts(analytics, ROLLOUTS)
        insert_calls(analytics, call_rows(CALLS))
        insert_train_steps(analytics, STEPS)
        yield analytics


def rows_of(client, sql: str) -> list[dict]:
    columns, rows = query_rows(client, sql)
    return [dict(zip(columns, row, strict=True)) for row in rows]


def test_the_sink_stores_the_choice_the_cached_prefix_and_the_scoring_time():
    calls = [dict(zip(CALL_COLUMNS, row, strict=True)) for row in call_rows(CALLS[:5])]
    got = [(c["call_id"], c["choice_index"], c["cached_tokens"], c["latency_ms"]) for c in calls]
    assert got == [("c1", 0, 0, 2000), ("c2", 0, 120, 3000), ("c2#1", 1, 120, 3000)]
    assert dict(zip(ROLLOUT_COLUMNS, ROLLOUTS[2], strict=True))["scoring_s"] == 0.25


def test_the_ledger_per_rollout(ledger):
    figures = {
        r["rollout_id"]: (r["requests"], r["engine_s"], r["prompt_tokens"], r["cached_tokens"],
                          r["new_prompt_tokens"], r["generated_tokens"], r["agent_s"], r["fate"])
        for r in rows_of(ledger, ROLLOUT_COSTS)
    }  # fmt: skip
    assert figures == {
        "r1": (2, 5.0, 250, 120, 130, 45, 5.0, "consumed"),
        "r2": (1, 1.0, 80, 0, 80, 5, 5.0, "aborted"),
        "r3": (1, 4.0, 60, 0, 60, 30, 36.0, "unconsumed"),
        "r4": (1, 2.5, 40, 0, 40, 8, 0.0, "dropped"),
        "r5": (2, 3.0, 20, 0, 20, 2, 0.0, "consumed"),
    }


def test_the_ledger_per_group_and_per_step(ledger):
    groups = [(g["group_id"], g["members"], g["scoring_s"], g["engine_s"], g["agent_s"])
              for g in rows_of(ledger, GROUP_COSTS)]  # fmt: skip
    assert groups == [("g1", 2, 0.5, 6.0, 10.0), ("g2", 2, 0.25, 7.0, 36.0)]
    steps = [(s["step"], s["wait_data_s"], s["update_s"]) for s in rows_of(ledger, STEP_COSTS)]
    assert steps == [(1, 7.0, 4.5), (2, 30.0, 3.0)]


def test_the_run_cost(ledger):
    (run,) = rows_of(ledger, COSTS[1])
    assert run == {
        "run_s": 100.0,
        "engine_s": 15.5,  # 5 + 1 + 4 + 2.5 + 3
        "agent_s": 46.0,  # 5 + 5 + 36 + 0
        "credit_s": 0.75,  # 0.5 + 0.25
        "update_s": 7.5,  # 4.5 + 3
        "c_sample": 0.155,  # 15.5 / 100
        "c_train": 0.075,  # 7.5 / 100
        "cost_s": 16.25,  # max(0.155, 0.075) * 100 + 0.75
        "serial_s": 23.75,  # 15.5 + 7.5 + 0.75
        "trained_samples": 3,
        "cost_per_sample_s": pytest.approx(16.25 / 3, abs=1e-4),
        "waste_engine_s": 7.5,  # r2 1 + r3 4 + r4 2.5
        "waste_share": pytest.approx(7.5 / 15.5, abs=1e-3),
    }


def test_the_cost_by_fate(ledger):
    fates = {f["fate"]: tuple(f.values())[1:] for f in rows_of(ledger, COST_BY_FATE[1])}
    # rollouts, engine_s, agent_s, prompt, cached, generated, share of the 15.5 engine seconds
    assert fates == {
        "aborted": (1, 1.0, 5.0, 80, 0, 5, pytest.approx(1 / 15.5, abs=1e-3)),
        "consumed": (2, 8.0, 5.0, 270, 120, 47, pytest.approx(8 / 15.5, abs=1e-3)),
        "dropped": (1, 2.5, 0.0, 40, 0, 8, pytest.approx(2.5 / 15.5, abs=1e-3)),
        "unconsumed": (1, 4.0, 36.0, 60, 0, 30, pytest.approx(4 / 15.5, abs=1e-3)),
    }


def test_the_cost_per_minute(ledger):
    _, sql = costs_over_time(60)
    got = [tuple(b.values()) for b in rows_of(ledger, sql)]
    # minute 0: calls c1 c2 c3 c5 (2 + 3 + 1 + 2.5), r1 r2's agent time, g1, step 1;
    # minute 1: calls c4 c6 c7 (4 + 1.5 + 1.5), r3 r5's agent time, g2 (last end 70 s), step 2.
    assert got == [
        (naive(0), 8.5, 10.0, 0.5, 4.5, 2, pytest.approx(8.5 / 60, abs=1e-3), 0.075, 9.0),
        (naive(60), 7.0, 36.0, 0.25, 3.0, 1, pytest.approx(7 / 60, abs=1e-3), 0.05, 7.25),
    ]


def test_an_older_store_gains_the_cost_columns(analytics):
    with own_database(analytics):
        for table in ("rollouts", "calls"):
            analytics.command(TABLES[table])  # the first release's layout
        analytics.command("INSERT INTO calls (call_id, rollout_id, ts, latency_ms) "
                          "VALUES ('old', 'r0', '2026-11-01 11:00:00', 500)")  # fmt: skip
        ensure_tables(analytics)
        ensure_tables(analytics)
        insert_calls(analytics, call_rows(CALLS[:5]))
        insert_rollouts(analytics, ROLLOUTS[:1])
        _, calls = query_rows(analytics, "SELECT call_id, choice_index, cached_tokens "
                                         "FROM calls FINAL ORDER BY ts, call_id")  # fmt: skip
        assert calls == [("old", 0, 0), ("c1", 0, 0), ("c2", 0, 120), ("c2#1", 1, 120)]
        assert query_rows(analytics, "SELECT scoring_s FROM rollouts FINAL")[1] == [(0.5,)]
    for table, added in (("rollouts", ROLLOUT_ADDED_COLUMNS), ("calls", CALL_ADDED_COLUMNS)):
        assert all(f"ADD COLUMN IF NOT EXISTS {name} " in MIGRATIONS[table] for name, _ in added)
        assert {name for name, _ in added} <= set(ROLLOUT_COLUMNS + CALL_COLUMNS)


def test_a_rollouts_row_with_a_staleness_wins_over_a_later_rescoring(analytics):
    """The scorer is at-least-once: a group re-read after a restart writes its rows again with
    staleness -1, after the sequencer wrote the staleness. Found by the chaos run."""
    with own_database(analytics):
        ensure_tables(analytics)
        scored, sequenced = rollout("r1", "g1", "finished", 0, 10, -1, 0.5), ROLLOUTS[0]
        for row in (scored, sequenced, scored):
            insert_rollouts(analytics, [row])
        got = query_rows(analytics, "SELECT rollout_id, staleness FROM rollouts FINAL")[1]
        assert got == [("r1", 0)]


def test_an_older_rollouts_table_is_copied_into_one_keeping_the_staleness(analytics):
    old_row = "('r0', 'g0', 'task', 0, 'finished', '2026-11-01 11:00:00', '2026-11-01 11:00:09', "
    with own_database(analytics):
        analytics.command(OLDER_ROLLOUTS)
        analytics.command(f"INSERT INTO rollouts VALUES {old_row} 9, 1, 1, 1, 10, 5, 0, 4)")
        ensure_tables(analytics)
        ensure_tables(analytics)
        engine = analytics.command(
            "SELECT engine FROM system.tables "
            "WHERE database = currentDatabase() AND name = 'rollouts'"
        )
        analytics.command(
            "INSERT INTO rollouts (rollout_id, group_id, task_id, queue_index, "
            "status, started_at, ended_at, duration_s, outcome_reward, "
            "total_reward, num_calls, prompt_tokens, completion_tokens, "
            f"policy_version, staleness) VALUES {old_row} 9, 1, 1, 1, 10, 5, 0, -1)"
        )
        got = query_rows(analytics, "SELECT rollout_id, staleness, scoring_s FROM rollouts FINAL")
        tables = query_rows(
            analytics,
            "SELECT name FROM system.tables WHERE database = currentDatabase() ORDER BY name",
        )[1]
    assert engine == "ReplacingMergeTree" and got[1] == [("r0", 4, 0.0)]
    assert ("rollouts_migrating",) not in tables and ("rollouts_replaced",) not in tables


OLDER_ROLLOUTS = """
    CREATE TABLE rollouts (
        rollout_id String, group_id String, task_id String, queue_index Int64,
        status LowCardinality(String), started_at DateTime64(6, 'UTC'),
        ended_at DateTime64(6, 'UTC'), duration_s Float64, outcome_reward Nullable(Float64),
        total_reward Float64, num_calls UInt32, prompt_tokens UInt64, completion_tokens UInt64,
        policy_version Int64, staleness Int64
    ) ENGINE = ReplacingMergeTree
    PARTITION BY toYYYYMM(ended_at)
    ORDER BY (ended_at, policy_version, rollout_id)
"""
"""The rollouts table of releases before its version column: the last row written won."""


def test_an_empty_store_costs_nothing_and_divides_by_nothing(analytics):
    with own_database(analytics):
        ensure_tables(analytics)
        (run,) = rows_of(analytics, COSTS[1])
        assert [rows_of(analytics, sql) for _, sql in cost_reports()[1:]] == [[], [], [], []]
    assert run == {
        "run_s": 0.0, "engine_s": 0.0, "agent_s": 0.0, "credit_s": 0.0, "update_s": 0.0,
        "c_sample": None, "c_train": None, "cost_s": 0.0, "serial_s": 0.0, "trained_samples": 0,
        "cost_per_sample_s": None, "waste_engine_s": 0.0, "waste_share": None,
    }  # fmt: skip


def test_the_scoring_time_travels_on_the_trajectory_outside_equality():
    trajectory = Trajectory("r", "g", "t", 0, "finished", T0, T0, [], scoring_s=0.25)
    decoded = codec.decode(codec.encode(trajectory), Trajectory)
    assert decoded.scoring_s == 0.25
    assert decoded == Trajectory("r", "g", "t", 0, "finished", T0, T0, [], scoring_s=9.0)


def test_each_scored_member_carries_its_groups_scoring_time():
    def member(rid: str, index: int) -> AssembledRollout:
        call = TrajectoryCall(f"{rid}-c", tokens(3), tokens(2), logprobs(2))
        return AssembledRollout(rid, "task", "g", 2, index, "finished", 1.0, T0, at(1), (call,), ())

    members = [member("a", 0), member("b", 1)]
    ticks = iter((10.0, 10.25))
    scored = score_trajectories(members, PipelineConfig(), at(1), clock=lambda: next(ticks))
    assert [t.scoring_s for t in scored.trajectories] == [0.25, 0.25]


def test_the_cost_reports_pass_the_owners_endpoint(analytics, infra_settings):
    """What the CLI runs through the streams worker: read-only SQL its checks let through."""
    session = analytics_client(infra_settings, session_settings(30.0, 1000))
    endpoint = SqlEndpoint(session, "k" * 32, lambda: None)
    answers = [endpoint.run(sql) for _, sql in cost_reports(60)]  # QueryError if refused
    assert answers[0][0][0] == "run_s" and len(answers) == 5


def test_rewards_mix_and_costs_by_domain(analytics):
    rows = [
        rollout("m1", "gm", "finished", 0, 10, 0, 0.1, "math", 1.0, 1.5, 1.0),
        rollout("m2", "gm", "truncated", 0, 4, 1, 0.1, "math", None, -0.5, 1.0),
        rollout("q1", "gq", "finished", 0, 30, 2, 0.1, "qa", 0.0, 0.0, 0.0),
        rollout("q2", "gq", "finished", 0, 40, -1, 0.1, "qa", 0.0, 0.0, 0.0),
    ]
    drifted = call("m2", "k4", 1, 10, 10, 0, 5)
    drifted[0].payload.retokenization_drift = True
    calls = [*call("m1", "k1", 1, 2000, 10, 0, 5), *call("q1", "k2", 1, 6000, 10, 0, 5),
             *call("gone", "k3", 1, 1000, 10, 0, 5), *drifted]  # fmt: skip
    with own_database(analytics):
        ensure_tables(analytics)
        insert_rollouts(analytics, rows)
        insert_calls(analytics, call_rows(calls))
        by_domain = {r["domain"]: r for r in rows_of(analytics, DOMAINS_SQL)}
        costs = {r["domain"]: r for r in rows_of(analytics, COST_BY_DOMAIN[1])}
    math, qa = by_domain["math"], by_domain["qa"]
    assert (math["rollouts"], math["mean_reward"], math["solved_share"]) == (2, 0.5, 1.0)
    assert (math["truncated"], math["trained"], math["no_signal"]) == (1, 2, 0)
    assert (qa["solved_share"], qa["trained"], qa["no_signal"], qa["mean_staleness"]) == (
        0.0,
        1,
        2,
        2.0,
    )
    assert (math["trained_share"], qa["trained_share"]) == (0.667, 0.333)
    assert (math["calls"], math["drift"], qa["calls"], qa["drift"]) == (2, 1, 1, 0)
    assert costs["math"]["engine_s"] == 2.01 and costs["qa"]["engine_s"] == 6.0
    assert costs["qa"]["waste_engine_s"] == 0.0 and costs[""]["engine_s"] == 1.0
    assert (costs["math"]["consumed"], costs["qa"]["engine_s_per_consumed"]) == (2, 6.0)


def test_where_a_rollouts_time_goes(analytics):
    """r: started at 0, calls asked at 2 s (1.5 s of engine) and 5 s (0.5 s), ended at 9 s:
    2 s before the first call, 5.5 - 3.5 - 2 = 1.5 s between, 9 - 5.5 = 3.5 s after the last."""

    def answered(call_id: str, asked: float, latency_ms: float) -> list:
        return [call_id, "r", at(asked + latency_ms / 1000), 0, 10, 10, 2, latency_ms, "stop", 0,
                0, 0]  # fmt: skip

    with own_database(analytics):
        ensure_tables(analytics)
        insert_rollouts(analytics, [rollout("r", "g", "finished", 0, 9, 0, 0.1, "qa")])
        insert_calls(analytics, [answered("a", 2, 1500), answered("b", 5, 500)])
        (row,) = rows_of(analytics, ROLLOUT_TIME[1])
    assert row == {"domain": "qa", "rollouts": 1, "duration_s": 9.0, "engine_s": 2.0,
                   "before_first_call_s": 2.0, "between_calls_s": 1.5,
                   "after_last_call_s": 3.5, "calls": 2.0}  # fmt: skip
