"""The closing report written to a pipe, as `forge-rl run | tee run.log` writes it: every
column's header and every value whole, never cut to 80 columns with "…"."""

from __future__ import annotations

import os
import threading

from forge_rl.cli_root import console_for
from forge_rl.closing_report import print_table

COSTS = (
    ["bucket_start", "engine_seconds", "agent_seconds", "credit_seconds", "update_seconds",
     "cost_seconds", "sampling_utilisation", "training_utilisation"],
    [["2026-12-07 10:00:00", 42.123456, 14.987654, 29.5551, 3.25, 45.373456, 0.7021, 0.0542],
     ["2026-12-07 10:01:00", 40.5, 13.25, 28.125, 3.5, 44.0, 0.675, 0.0583]],
)  # fmt: skip
DOMAINS = (
    ["domain", "rollouts", "mean_reward", "solved_share", "truncated", "mean_staleness",
     "uniform_groups"],
    [["guess", 312, 0.4123, 0.5513, 12, 1.27, 9], ["echo", 298, 0.8812, 0.9161, 0, 1.19, 31]],
)  # fmt: skip


def _through_a_pipe(*tables: tuple[str, list[str], list[list[object]]]) -> str:
    read_end, write_end = os.pipe()
    chunks: list[bytes] = []
    reader = threading.Thread(
        target=lambda: chunks.extend(iter(lambda: os.read(read_end, 65536), b""))
    )
    reader.start()
    with os.fdopen(write_end, "w") as pipe:
        console = console_for(pipe)
        assert not console.is_terminal
        for title, columns, rows in tables:
            print_table(console, title, columns, rows)
    reader.join()
    os.close(read_end)
    return b"".join(chunks).decode()


def test_the_closing_tables_reach_a_pipe_whole():
    text = _through_a_pipe(("Costs per minute", *COSTS), ("By domain", *DOMAINS))
    assert "…" not in text
    for columns, rows in (COSTS, DOMAINS):
        for header in columns:
            assert header in text
        for row in rows:
            for value in row:
                assert str(value) in text
    assert max(len(line) for line in text.splitlines()) > 80  # its natural width, not 80
