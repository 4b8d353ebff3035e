"""Analytics: the ClickHouse tables the worker fills, and reading them.

- sinks — analytics rows from records, idempotent on the records' ids (I/O: ClickHouse)
- analytics_wiring — the sink's buffer, flushes and SQL page added to the worker (I/O)
- reports — ready analytics reports: SQL over the tables the sink fills (pure)
- sql_endpoint — the worker's read-only SQL endpoint over the embedded store (I/O)
"""
