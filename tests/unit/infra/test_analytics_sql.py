from __future__ import annotations

import pytest

from infra.analytics import is_read_only


@pytest.mark.parametrize(
    "sql", ["SELECT 1", "  with x as (select 1) select * from x;", "SHOW TABLES"]
)
def test_reads_are_served(sql):
    assert is_read_only(sql)


@pytest.mark.parametrize(
    "sql", ["", "DROP TABLE rollouts", "SELECT 1; DROP TABLE rollouts", "INSERT INTO t VALUES (1)"]
)
def test_anything_else_is_refused(sql):
    assert not is_read_only(sql)
