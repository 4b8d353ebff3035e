"""The SQL endpoint's policy on real chDB: the key, ClickHouse's own read-only mode, the parser
check for what read-only lets through, the time and size limits, and the thread."""

from __future__ import annotations

import asyncio
import stat
import time

import pytest
from clickhouse_connect.driver.exceptions import DatabaseError

from infra.analytics import analytics_client
from streams.analytics.reports import REPORTS
from streams.analytics.sql_endpoint import (
    QueryError,
    SqlEndpoint,
    key_matches,
    publish_key,
    session_settings,
)

KEY = "k" * 32
# Hashing defeats the count() shortcut: a count over numbers() answers 10**10 rows in 0.9 s.
SLOW_QUERY = "SELECT max(sipHash64(number)) FROM numbers(100000000000)"


def endpoint(infra_settings, timeout_s=30.0, max_rows=1000, before_query=lambda: None):
    session = analytics_client(infra_settings, session_settings(timeout_s, max_rows))
    return SqlEndpoint(session, KEY, before_query)


@pytest.fixture(scope="module")
def sql(analytics, infra_settings):
    """On the session's store (chDB admits one path per process): ``analytics`` opened it."""
    return endpoint(infra_settings)


def test_a_select_over_the_store_is_served(sql):
    columns, rows = sql.run("SELECT count() AS n FROM rollouts FINAL;")
    assert columns == ["n"] and len(rows) == 1 and rows[0][0] >= 0  # the session's store is shared
    assert sql.run("WITH x AS (SELECT number FROM numbers(3)) SELECT sum(number) FROM x")[1] == [
        (3,)
    ]
    assert sql.run("SHOW TABLES")[1]
    assert sql.run("DESCRIBE TABLE rollouts")[1]


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT * FROM file('/etc/passwd', 'LineAsString')",
        "SELECT * FROM url('http://127.0.0.1:9/x', 'LineAsString')",
        "SELECT * FROM remote('127.0.0.1:9000', system.one)",
        "SELECT * FROM remoteSecure('127.0.0.1:9440', system.one)",
        "SELECT * FROM executable('cat /etc/passwd', 'LineAsString', 'x String')",
        "SELECT * FROM mysql('127.0.0.1:3306', 'db', 't', 'u', 'p')",
        "SELECT * FROM postgresql('127.0.0.1:5432', 'db', 't', 'u', 'p')",
    ],
)
def test_clickhouse_itself_refuses_outside_reach_on_the_session(sql, statement):
    with pytest.raises(DatabaseError, match="READONLY"):
        sql.session.query(statement)


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO train_steps (step) VALUES (1)",
        "DROP TABLE rollouts",
        "CREATE TABLE x (a Int8) ENGINE = Memory",
        "SET readonly = 0",
        "SELECT 1 SETTINGS max_execution_time = 0",
    ],
)
def test_clickhouse_itself_refuses_writes_ddl_and_settings(sql, statement):
    with pytest.raises(DatabaseError, match="READONLY"):
        sql.session.query(statement)


@pytest.mark.parametrize(
    ("statement", "reason"),
    [
        ("SELECT * FROM file('/etc/passwd', 'LineAsString')", "file"),
        ("SELECT * FROM FILE('/etc/passwd', 'LineAsString')", "FILE"),
        ("SELECT file('/etc/passwd')", "file"),  # the scalar: served by readonly=1 alone
        ("DESCRIBE TABLE file('/etc/passwd')", "file"),  # so is this: it infers the schema
        ("SELECT * FROM url('http://127.0.0.1:9/x', 'LineAsString')", "url"),
        ("SELECT * FROM (SELECT * FROM remote('127.0.0.1:9000', system.one))", "remote"),
        ("WITH c AS (SELECT * FROM s3('http://127.0.0.1:9/b/k.csv')) SELECT * FROM c", "s3"),
        ("SELECT 1 IN s3('http://127.0.0.1:9/b/k.csv')", "s3"),
        ("SELECT * FROM filesystem('/')", "filesystem"),
        ("SELECT * FROM python(x)", "python"),
        ("EXPLAIN SELECT * FROM url('http://127.0.0.1:9/x')", "url"),
        ("SELECT 1 INTO OUTFILE 'leak.txt'", "OUTFILE"),
        ("SHOW TABLES INTO OUTFILE 'leak.txt'", "OUTFILE"),
        ("USE system", "only SELECT"),
        ("KILL QUERY WHERE 1", "only SELECT"),
        ("INSERT INTO train_steps (step) VALUES (1)", "only SELECT"),
        ("SELECT 1; SELECT file('/etc/hostname')", "one statement"),  # chDB would run both
        (", optimize = 1 SELECT * FROM s3('http://127.0.0.1:9/b/k.csv')", "keyword"),
        ("optimize = 1 SELECT * FROM s3('http://127.0.0.1:9/b/k.csv')", "Syntax error"),
    ],
)
def test_what_readonly_lets_through_is_refused_by_parsing(sql, statement, reason):
    with pytest.raises(QueryError, match=reason):
        sql.run(statement)


def test_a_slow_query_is_stopped_at_the_time_limit(analytics, infra_settings):
    quick = endpoint(infra_settings, timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(QueryError, match="Timeout exceeded"):
        quick.run(SLOW_QUERY)
    assert time.monotonic() - started < 5


def test_a_large_result_is_refused(analytics, infra_settings):
    small = endpoint(infra_settings, max_rows=100)
    assert len(small.run("SELECT number FROM numbers(100)")[1]) == 100
    with pytest.raises(QueryError, match="Limit for result exceeded"):
        small.run("SELECT number FROM numbers(100000)")


async def test_a_query_runs_off_the_event_loop(analytics, infra_settings):
    quick = endpoint(infra_settings, timeout_s=1.0)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.create_task(tick())
    reply = await quick.answer(f"Bearer {KEY}", SLOW_QUERY)
    ticker.cancel()
    assert reply.status == 400 and "Timeout exceeded" in reply.body["error"]
    assert ticks > 40  # the loop went on through the whole second


async def test_the_key_is_required_before_anything_runs(analytics, infra_settings):
    calls: list[int] = []
    guarded = endpoint(infra_settings, before_query=lambda: calls.append(1))
    assert (await guarded.answer(None, "SELECT 1")).status == 401
    assert (await guarded.answer("Bearer " + "x" * 32, "SELECT 1")).status == 403
    assert (await guarded.answer(f"Basic {KEY}", "SELECT 1")).status == 403
    assert calls == []  # an unauthenticated request does not even flush the sink
    reply = await guarded.answer(f"bearer {KEY}", "SELECT 41 + 1 AS answer")
    assert reply == (200, {"columns": ["answer"], "rows": [["42"]]}) and calls == [1]
    refused = await guarded.answer(f"Bearer {KEY}", "SELECT * FROM file('/etc/passwd')")
    assert refused.status == 400 and "file" in refused.body["error"]


def test_key_matches_only_the_bearer_key():
    assert key_matches(KEY, f"Bearer {KEY}")
    assert not key_matches(KEY, f"Bearer {KEY[:-1]}")
    assert not key_matches(KEY, KEY)
    assert not key_matches(KEY, None)
    assert not key_matches(KEY, "Bearer ")


def test_the_published_key_is_private_and_new_each_start(tmp_path):
    path = tmp_path / "streams" / "sql.key"
    first = publish_key(path, None)
    assert path.read_text() == first and len(first) >= 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert publish_key(path, None) != first
    assert publish_key(path, KEY) == KEY == path.read_text()
    assert [p.name for p in path.parent.iterdir()] == ["sql.key"]


def test_readonly_is_set_last():
    assert list(session_settings(1.0, 10))[-1] == "readonly"


@pytest.mark.parametrize("report", sorted(REPORTS))
def test_every_ready_report_is_served(sql, report):
    sql.run(REPORTS[report][1])


@pytest.mark.parametrize(
    "statement",
    [
        "EXPLAIN indexes = 1 SELECT * FROM rollouts WHERE policy_version = 3",
        "EXPLAIN PIPELINE SELECT 1",
        "SHOW COLUMNS FROM rollouts",
        "SHOW CREATE TABLE rollouts",
        "EXISTS TABLE rollouts",
        "SELECT 1 UNION ALL SELECT 2",
        "(SELECT * FROM view(SELECT number FROM numbers(2)))",
    ],
)
def test_other_reads_are_served(sql, statement):
    sql.run(statement)
