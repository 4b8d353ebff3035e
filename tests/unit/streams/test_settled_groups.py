"""Marks of settled groups: their bytes, their log, and when they are forgotten."""

from __future__ import annotations

from datetime import timedelta

import pytest

from streams.stage.settled_groups import MarkRecord, SettledGroups, SettledMark
from tests.builders import T0

KEEP = timedelta(minutes=3)


def test_a_mark_round_trips_and_anything_else_is_refused():
    mark = SettledMark(True, frozenset({"a", "b"}), T0)
    assert SettledMark.decode(mark.encode()) == mark
    for bad in (b"", b"garbage", b"[1, 2]", b'[1, ["a"], "2026-11-01T00:00:00+00:00"]',
                b'[true, [1], "2026-11-01T00:00:00+00:00"]', b'[true, ["a"], "yesterday"]',
                b'[true, ["a"], "2026-11-01T00:00:00"]'):  # fmt: skip
        with pytest.raises(ValueError, match="not a settled-group mark"):
            SettledMark.decode(bad)


def test_the_log_is_applied_in_order_tombstones_included_and_bad_records_come_back():
    a, b = SettledMark(False, frozenset({"x"}), T0), SettledMark(True, frozenset({"y"}), T0)
    settled = SettledGroups(KEEP)
    bad = settled.load([
        MarkRecord(0, b"g", a.encode()), MarkRecord(1, b"h", b.encode()),
        MarkRecord(2, b"g", None), MarkRecord(3, b"k", b"junk"), MarkRecord(4, None, a.encode()),
    ])  # fmt: skip
    assert settled.get("g") is None and settled.get("h") == b and len(settled) == 1
    assert [(r.offset, reason.split(":")[0]) for r, reason in bad] == [
        (3, "not a settled-group mark"),
        (4, "a settled-group mark without a key"),
    ]


def test_marks_are_forgotten_once_the_horizon_is_past_their_deadline_by_the_keep():
    settled = SettledGroups(KEEP)
    settled.add("old", SettledMark(False, frozenset({"a"}), T0))
    settled.add("new", SettledMark(False, frozenset({"b"}), T0 + KEEP))
    assert settled.prune(T0 + KEEP) == []
    assert settled.prune(T0 + KEEP + timedelta(seconds=1)) == ["old"]
    assert settled.get("old") is None and settled.get("new") is not None
