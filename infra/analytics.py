"""The analytics store: ClickHouse through clickhouse-connect, embedded chDB or a server.

Embedded chDB admits one process per data directory. The streams worker — the only writer —
owns it in local mode; other processes (the CLI) query through the worker's web endpoint,
with the key the worker publishes in FORGE_HOME (see ``streams.analytics.sql_endpoint``).
With FORGE_CLICKHOUSE_URL every process talks to the server directly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import clickhouse_connect
from clickhouse_connect.driver.client import Client

from infra.config import InfraSettings
from infra.settings import load_settings
from schemas.errors import ForgeError

TABLES: dict[str, str] = {
    "rollouts": """
        CREATE TABLE IF NOT EXISTS rollouts (
            rollout_id String,
            group_id String,
            task_id String,
            queue_index Int64,
            status LowCardinality(String),
            started_at DateTime64(6, 'UTC'),
            ended_at DateTime64(6, 'UTC'),
            duration_s Float64,
            outcome_reward Nullable(Float64),
            total_reward Float64,
            num_calls UInt32,
            prompt_tokens UInt64,
            completion_tokens UInt64,
            policy_version Int64,
            staleness Int64,
            row_version UInt64 MATERIALIZED toUInt64(greatest(staleness + 1, 0))
        ) ENGINE = ReplacingMergeTree(row_version)
        PARTITION BY toYYYYMM(ended_at)
        ORDER BY (ended_at, policy_version, rollout_id)
    """,
    "calls": """
        CREATE TABLE IF NOT EXISTS calls (
            call_id String,
            rollout_id String,
            ts DateTime64(6, 'UTC'),
            policy_version Int64,
            prompt_tokens UInt32,
            new_prompt_tokens UInt32,
            completion_tokens UInt32,
            latency_ms Float64,
            finish_reason LowCardinality(String),
            retokenization_drift UInt8
        ) ENGINE = ReplacingMergeTree
        PARTITION BY toYYYYMM(ts)
        ORDER BY (ts, policy_version, call_id)
    """,
    "train_steps": """
        CREATE TABLE IF NOT EXISTS train_steps (
            step Int64,
            policy_version Int64,
            ts DateTime64(6, 'UTC'),
            loss Float64,
            samples UInt32,
            tokens UInt64,
            unique_tokens UInt64,
            dedup_ratio Float64,
            clip_fraction Float64,
            staleness_mean Float64,
            staleness_max Int64,
            step_time_s Float64
        ) ENGINE = ReplacingMergeTree
        PARTITION BY toYYYYMM(ts)
        ORDER BY (ts, policy_version, step)
    """,
}
"""ReplacingMergeTree keyed on the record's id: re-inserting a replayed row is idempotent
(queries that must count exactly use FINAL). Sorted by time and policy version, the two axes
every report slices by."""

TRAIN_STEP_ADDED_COLUMNS: tuple[tuple[str, str], ...] = (
    ("kl_mean", "Float64"),
    ("kl_max", "Float64"),
    ("ratio_mean", "Float64"),
    ("ratio_std", "Float64"),
    ("ratio_max", "Float64"),
    ("newest_version_token_share", "Float64"),
    ("kl_filtered_samples", "UInt32"),
    ("wait_data_s", "Float64"),
    ("tree_build_s", "Float64"),
    ("forward_backward_s", "Float64"),
    ("optimizer_s", "Float64"),
    ("export_s", "Float64"),
    ("checkpoint_s", "Float64"),
)
"""train_steps columns added after the table's first release (TrainStep fields with defaults):
``ensure_tables`` adds them to a table created before them, so an old store keeps working."""

ROLLOUT_ADDED_COLUMNS: tuple[tuple[str, str], ...] = (
    ("scoring_s", "Float64"),
    ("domain", "LowCardinality(String) DEFAULT 'default'"),
    ("group_reward_spread", "Float64"),
)
"""rollouts columns added later: the rollout's group's scoring time (``Trajectory.scoring_s``),
its domain, and the spread of its group's total rewards (0: the group taught nothing)."""

CALL_ADDED_COLUMNS: tuple[tuple[str, str], ...] = (
    ("choice_index", "UInt32"),
    ("cached_tokens", "UInt32"),
)
"""calls columns added later: which choice of its request a row is (a request's engine time and
prompt are counted once, on choice 0) and the prompt tokens shared with the parent call."""


def _added(table: str, columns: tuple[tuple[str, str], ...]) -> str:
    return f"ALTER TABLE {table} " + ", ".join(
        f"ADD COLUMN IF NOT EXISTS {name} {kind}" for name, kind in columns
    )


MIGRATIONS: dict[str, str] = {
    "train_steps": _added("train_steps", TRAIN_STEP_ADDED_COLUMNS),
    "rollouts": _added("rollouts", ROLLOUT_ADDED_COLUMNS),
    "calls": _added("calls", CALL_ADDED_COLUMNS),
}
"""Idempotent DDL bringing a table created by an older release up to ``TABLES``."""


class AnalyticsUnavailableError(ForgeError):
    """The store cannot be opened (for chDB: another process owns the directory)."""


def analytics_client(settings: InfraSettings, session: dict[str, Any] | None = None) -> Client:
    """A client for the configured store; embedded chDB unless FORGE_CLICKHOUSE_URL is set.

    ``session``: ClickHouse settings of every query on this client (chDB applies them in order,
    as SETs on a connection of its own).
    """
    if settings.clickhouse_url:
        try:
            return clickhouse_connect.get_client(dsn=settings.clickhouse_url, settings=session)
        except Exception as exc:  # the driver raises several unrelated types on connect
            raise AnalyticsUnavailableError(
                f"ClickHouse at {settings.clickhouse_url} is unreachable: {exc}"
            ) from exc
    settings.chdb_path.mkdir(parents=True, exist_ok=True)
    try:
        return clickhouse_connect.get_client(dsn=f"chdb://{settings.chdb_path}", settings=session)
    except Exception as exc:
        raise AnalyticsUnavailableError(
            f"embedded ClickHouse at {settings.chdb_path} is held by another process "
            f"(the streams worker owns it while it runs; query through it): {exc}"
        ) from exc


ROLLOUTS_ENGINE = "ReplacingMergeTree(row_version)"
"""A rollout's row is written by the sequencer when its first scoring is applied (staleness
-1), again once its sample is emitted (its staleness), and again by every later sequencer
term for forge.train's samples; in several stores or after a failover a -1 row can come after
the one with a staleness: that one must win whatever the order, so it carries the higher
version."""


def ensure_tables(client: Client) -> None:
    """Create the analytics tables if missing, bring an older table up to date. Idempotent."""
    for ddl in TABLES.values():
        client.command(ddl)
    for ddl in MIGRATIONS.values():
        client.command(ddl)
    _rollouts_keep_staleness(client)


def _rollouts_keep_staleness(client: Client) -> None:
    """A rollouts table from before ``ROLLOUTS_ENGINE`` kept the last row written: copied into
    one that keeps the row with a staleness (an engine cannot be altered)."""
    engine = client.command(
        "SELECT engine_full FROM system.tables "
        "WHERE database = currentDatabase() AND name = 'rollouts'"
    )
    if str(engine).startswith(ROLLOUTS_ENGINE):
        return
    client.command("DROP TABLE IF EXISTS rollouts_migrating")
    client.command(TABLES["rollouts"].replace("rollouts (", "rollouts_migrating (", 1))
    client.command(_added("rollouts_migrating", ROLLOUT_ADDED_COLUMNS))
    old = client.query(
        "SELECT name FROM system.columns WHERE database = currentDatabase() "
        "AND table = 'rollouts' AND default_kind != 'MATERIALIZED' ORDER BY position"
    )
    columns = ", ".join(row[0] for row in old.result_rows)
    client.command(f"INSERT INTO rollouts_migrating ({columns}) SELECT {columns} FROM rollouts")
    client.command("RENAME TABLE rollouts TO rollouts_replaced, rollouts_migrating TO rollouts")
    client.command("DROP TABLE rollouts_replaced")


def query_rows(client: Client, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    result = client.query(sql)
    return list(result.column_names), [tuple(r) for r in result.result_rows]


def owner_key_file(home: Path) -> Path:
    """Where the store's owner (the streams worker) writes its query key, mode 0600."""
    return home / "streams" / "sql.key"


def owner_key(home: Path) -> str:
    """The query key the streams worker using ``home`` published."""
    path = owner_key_file(home)
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise AnalyticsUnavailableError(
            f"no query key at {path} ({exc.strerror}): is the streams worker running? "
            "Elsewhere, set FORGE_STREAMS_SQL_KEY to the worker's key"
        ) from exc


def query_owner(
    web_url: str, sql: str, timeout_s: float = 60.0, key: str | None = None
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run read-only SQL through the process that owns the embedded store.

    ``key`` defaults to the one published in the FORGE_HOME this process's environment names.
    """
    import httpx

    if key is None:
        key = owner_key(load_settings(InfraSettings).home)
    try:
        response = httpx.get(
            f"{web_url}/query/",
            params={"sql": sql},
            headers={"Authorization": f"Bearer {key}"},
            timeout=timeout_s,
        )
    except httpx.HTTPError as exc:
        raise AnalyticsUnavailableError(
            f"the store's owner at {web_url} did not answer: {exc}"
        ) from exc
    try:
        body = response.json()
    except ValueError:
        body = {"error": f"HTTP {response.status_code}"}
    if response.status_code != 200:
        raise AnalyticsUnavailableError(f"query refused by {web_url}: {body.get('error')}")
    return list(body["columns"]), [tuple(r) for r in body["rows"]]
