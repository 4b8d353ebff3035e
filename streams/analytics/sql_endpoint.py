"""The worker's read-only SQL endpoint: who may ask, what may run, for how long, on which thread.

The worker owns the embedded store, so other processes (the CLI, `forge-rl run`) read it
through ``/query/``. Nothing there may reach past the analytics tables:

- a bearer key, compared in constant time; a random one each start unless configured, and
  written 0600 to FORGE_HOME for the clients on this machine;
- ClickHouse itself: queries run on a session of their own with ``readonly=1`` — no write, no
  DDL, no SET, and file/url/remote/executable/mysql/... refused — ``max_execution_time`` and
  ``max_result_rows``;
- ClickHouse's own parser (``EXPLAIN AST``) for what chDB 26.9 lets through under readonly:
  the scalar ``file()``, ``INTO OUTFILE``, ``USE`` and ``KILL QUERY``, and table functions
  such as ``s3``, ``filesystem`` or chDB's ``python``. Only the in-memory generators below are
  admitted, so a table function added by a later ClickHouse is refused until listed. One
  statement per request: chDB would run every statement after a ``;``, even after an EXPLAIN.

Queries run one at a time on a thread of their own: chDB releases the GIL, so the event loop
and the Kafka heartbeats go on while one runs (a thread of the default pool could starve the
loop's DNS lookups).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ClickHouseError

from infra.analytics import analytics_client, owner_key_file, query_rows
from infra.config import InfraSettings
from schemas.errors import ForgeError
from streams.config import StreamsSettings

READ_STATEMENTS = frozenset({
    "SelectWithUnionQuery", "Explain", "ShowTables", "ShowColumns", "DescribeQuery",
    "ShowCreateTableQuery", "ExistsTableQuery",
})  # fmt: skip
"""Root nodes of ``EXPLAIN AST`` for the statements served (SELECT and WITH are the first)."""

GENERATORS = frozenset({
    "numbers", "numbers_mt", "zeros", "zeros_mt", "generate_series", "generateseries",
    "generaterandom", "primes", "values", "null", "view", "format",
})  # fmt: skip
"""Table functions that only compute (lower case: ClickHouse matches these names in any case)."""

EXPLAIN = "EXPLAIN AST graph = 0, optimize = 0 "
"""Options spelled out, so a statement cannot add ``optimize = 1`` (which analyses the query,
inferring the schema of an ``s3(...)`` by fetching it) before it is checked."""


class QueryError(ForgeError):
    """A statement refused here or by ClickHouse, or stopped by it; the message says why."""


class Reply(NamedTuple):
    status: int
    body: dict[str, Any]


def session_settings(timeout_s: float, max_rows: int) -> dict[str, Any]:
    """ClickHouse settings of the endpoint's session. ``readonly`` comes last: chDB applies them
    one SET at a time, and after ``readonly=1`` no setting can change, in a query either."""
    return {
        "max_execution_time": timeout_s,
        "max_result_rows": max_rows,
        "result_overflow_mode": "throw",
        "allow_ddl": 0,
        "readonly": 1,
    }


def refusal(ast: Sequence[str], table_functions: frozenset[str]) -> str | None:
    """Why the statement ClickHouse parsed into ``ast`` (``EXPLAIN AST`` lines, one node each,
    indented by depth) must not run; None when it may. ``table_functions``: every table function
    the server has, in lower case (some share a name with a scalar function, as ``file`` does)."""
    root = ast[0].split()[0] if ast and ast[0].strip() else ""
    if root not in READ_STATEMENTS:
        return "only SELECT, WITH, SHOW, DESCRIBE, EXISTS and EXPLAIN are served"
    for line in ast[1:]:
        node = line.split()
        if node[:1] == ["Literal"] and len(line) - len(line.lstrip(" ")) == 1:
            return "INTO OUTFILE is not served"  # the only literal right under a statement
        if node[:1] == ["Function"] and len(node) > 1:
            name = node[1].lower()
            if name in table_functions and name not in GENERATORS:
                return f"{node[1]}() reaches outside the analytics store"
    return None


def key_matches(key: str, authorization: str | None) -> bool:
    """Whether an ``Authorization: Bearer <key>`` header carries ``key`` (constant time)."""
    scheme, _, given = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(
        given.strip().encode(), key.encode()
    )


def publish_key(path: Path, key: str | None) -> str:
    """The key to serve with (``key``, or a new random one), written to ``path`` with mode 0600 —
    replaced whole, so a client never reads half a key."""
    served = key or secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, staged = tempfile.mkstemp(dir=path.parent, prefix=".sql-key-")  # created 0600
    with os.fdopen(fd, "w") as file:
        file.write(served)
    os.replace(staged, path)
    return served


class SqlEndpoint:
    """Serves ``/query/``: the key checked, ``before_query`` run (the worker flushes its sink so a
    reader sees every row scored so far), then the statement checked and run off the loop."""

    def __init__(self, session: Client, key: str, before_query: Callable[[], object]) -> None:
        self.session = session
        self._key = key
        self._before_query = before_query
        names = session.query("SELECT name FROM system.table_functions").result_rows
        self._table_functions = frozenset(name.lower() for (name,) in names)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="forge-sql")

    async def answer(self, authorization: str | None, sql: str) -> Reply:
        """The HTTP reply to a request; every error's status is decided here."""
        if not authorization:
            return Reply(401, {"error": "an Authorization: Bearer <key> header is required"})
        if not key_matches(self._key, authorization):
            return Reply(403, {"error": "wrong key"})
        self._before_query()
        loop = asyncio.get_running_loop()
        try:
            columns, rows = await loop.run_in_executor(self._thread, self.run, sql)
        except QueryError as exc:
            return Reply(400, {"error": str(exc)})
        return Reply(200, {"columns": columns, "rows": [[str(v) for v in r] for r in rows]})

    def run(self, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Check ``sql`` with ClickHouse's parser, then run it on the read-only session."""
        statement = sql.strip().rstrip(";")
        if ";" in statement:  # chDB runs each statement, the EXPLAIN's included
            raise QueryError("one statement at a time")
        if not statement[:1].isalpha() and statement[:1] != "(":
            raise QueryError("a statement must start with its keyword (SELECT, SHOW, ...)")
        try:
            ast = [row[0] for row in self.session.query(EXPLAIN + statement).result_rows]
            reason = refusal(ast, self._table_functions)
            if reason is not None:
                raise QueryError(reason)
            return query_rows(self.session, statement)
        except ClickHouseError as exc:
            raise QueryError(_first_line(exc)) from exc


def open_endpoint(
    settings: StreamsSettings, infra: InfraSettings, before_query: Callable[[], object]
) -> SqlEndpoint:
    """The endpoint on a read-only session of the store, its key published for local clients."""
    configured = settings.sql_key.get_secret_value() if settings.sql_key else None
    limits = session_settings(settings.sql_timeout_s, settings.sql_max_rows)
    key = publish_key(owner_key_file(infra.home), configured)
    return SqlEndpoint(analytics_client(infra, limits), key, before_query)


def _first_line(exc: ClickHouseError) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
