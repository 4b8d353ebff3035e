"""Invariants of the windowed FIFO, property-tested with hypothesis."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.sequencing.windowed_fifo import Dropped, Emitted, WindowedFifo


@st.composite
def schedules(draw):
    """Items entering the queue in order and completing in a random order, some never."""
    n = draw(st.integers(1, 30))
    order = draw(st.permutations(range(n)))
    never = draw(st.sets(st.sampled_from(range(n)), max_size=n // 3))
    return n, [i for i in order if i not in never], never


def run(fifo, n, completions):
    """Enqueue all, then complete one by one, polling after each; returns emission order."""
    for i in range(n):
        fifo.enqueue(i, ts=0.0)
    emitted = []
    for step, i in enumerate(completions):
        fifo.complete(i, f"item{i}", policy_version=0)
        for out in fifo.poll(now=float(step), current_version=0):
            assert isinstance(out, Emitted)
            emitted.append(out.index)
    return emitted


@given(schedules(), st.one_of(st.none(), st.integers(1, 10)))
@settings(max_examples=300, deadline=None)
def test_nothing_beyond_the_window_and_each_completed_item_once(case, window):
    n, completions, never = case
    fifo = WindowedFifo(window)
    for i in range(n):
        fifo.enqueue(i, ts=0.0)
    emitted = []
    for step, i in enumerate(completions):
        fifo.complete(i, i, 0)
        fifo.complete(i, i, 0)  # a duplicate completion changes nothing
        head_before = fifo.head
        for out in fifo.poll(now=float(step), current_version=0):
            assert window is None or out.index < fifo.head + window
            assert out.index >= head_before
            emitted.append(out.index)
    assert len(emitted) == len(set(emitted))
    blocked_from = min(never, default=n)
    expected = {i for i in completions if window is None or i < blocked_from + window}
    assert set(emitted) == expected


@given(schedules())
@settings(max_examples=200, deadline=None)
def test_window_one_is_strict_fifo(case):
    n, completions, _ = case
    emitted = run(WindowedFifo(1), n, completions)
    assert emitted == list(range(len(emitted)))


@given(schedules())
@settings(max_examples=200, deadline=None)
def test_unbounded_window_is_completion_order(case):
    n, completions, _ = case
    assert run(WindowedFifo(None), n, completions) == completions


@given(schedules(), st.integers(1, 5))
@settings(max_examples=200, deadline=None)
def test_timed_out_items_unblock_the_head(case, window):
    n, completions, never = case
    fifo = WindowedFifo(window, timeout_s=10.0)
    for i in range(n):
        fifo.enqueue(i, ts=0.0)
    for i in completions:
        fifo.complete(i, i, 0)
    fifo.poll(now=5.0, current_version=0)
    results = fifo.poll(now=11.0, current_version=0)
    dropped = {o.index for o in results if isinstance(o, Dropped)}
    assert dropped == set(never)
    assert fifo.stats.emitted == len(completions)
    assert fifo.head == n and fifo.pending() == 0


def test_stale_items_are_dropped_and_counted():
    fifo = WindowedFifo(4, max_staleness=2)
    for i in range(3):
        fifo.enqueue(i, ts=0.0)
    fifo.complete(0, "a", policy_version=5)
    fifo.complete(1, "b", policy_version=2)
    fifo.complete(2, "c", policy_version=4)
    out = fifo.poll(now=0.0, current_version=5)
    assert [(type(o).__name__, o.index) for o in out] == [
        ("Emitted", 0),
        ("Dropped", 1),
        ("Emitted", 2),
    ]
    assert out[2].staleness == 1
    assert fifo.stats.dropped_stale == 1 and fifo.stats.emitted == 2 and fifo.head == 3


def test_a_completion_before_its_queue_entry_waits_for_it_and_gaps_are_skipped():
    fifo = WindowedFifo(1)
    fifo.complete(2, "early", 0)
    assert fifo.poll(0.0, 0) == []
    fifo.enqueue(0, 0.0)
    fifo.complete(0, "first", 0)
    fifo.enqueue(2, 0.0)  # offset 1 held no queue entry
    assert [o.index for o in fifo.poll(1.0, 0)] == [0, 2]


def test_late_completion_after_timeout_is_counted_not_emitted():
    fifo = WindowedFifo(None, timeout_s=1.0)
    fifo.enqueue(0, 0.0)
    assert fifo.poll(2.0, 0) == [Dropped(0, "timeout")]
    fifo.complete(0, "late", 0)
    assert fifo.poll(3.0, 0) == []
    assert fifo.stats.late == 1


@given(schedules(), st.one_of(st.none(), st.integers(1, 10)), st.data())
@settings(max_examples=300, deadline=None)
def test_a_restart_seeded_with_what_was_emitted_emits_exactly_the_rest(case, window, data):
    """Stopped after any completion, then rebuilt from the whole log with the emitted indices
    consumed — their completions missing, as if retention had trimmed them — the FIFO emits
    exactly what the uninterrupted run emitted after the stop, in the same order."""
    n, completions, _ = case
    whole = run(WindowedFifo(window), n, completions)
    stop = data.draw(st.integers(0, len(completions)))
    before = run(WindowedFifo(window), n, completions[:stop])
    rebuilt = WindowedFifo(window, consumed=frozenset(before))
    survivors = [i for i in completions if i not in before]
    after = run(rebuilt, n, survivors)
    assert before + after == whole
