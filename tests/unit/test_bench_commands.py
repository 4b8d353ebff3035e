"""Every bench runs with exactly the command bench/RESULTS.md gives for it: each such command,
with `--help` appended (its options before it are parsed and checked), exits 0, and every
bench script has a command there."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "RESULTS.md"
COMMAND = re.compile(r"(?:^|`)((?:[A-Z_]+=\S+ )*python bench/\w+\.py[^`#\n]*)", re.MULTILINE)


def results_commands() -> list[str]:
    return sorted({m.group(1).strip() for m in COMMAND.finditer(RESULTS.read_text())})


def bench_scripts() -> set[str]:
    """Scripts with a main, less those another bench runs as its helper."""
    scripts = {p: p.read_text() for p in (ROOT / "bench").glob("*.py")}
    helpers = {p.name for p in scripts for q, text in scripts.items()
               if q != p and f'with_name("{p.name}")' in text}  # fmt: skip
    return {p.name for p, text in scripts.items() if "def main(" in text} - helpers


def test_every_bench_has_a_command_in_results():
    named = {re.search(r"bench/(\w+\.py)", c).group(1) for c in results_commands()}  # type: ignore[union-attr]
    assert bench_scripts() <= named, f"no command in RESULTS for {bench_scripts() - named}"


@pytest.mark.parametrize("command", results_commands())
def test_the_command_results_gives_parses(command):
    words = [w for w in shlex.split(command) if not re.fullmatch(r"[A-Z_]+=\S+", w)]
    assert words[0] == "python"
    done = subprocess.run([sys.executable, *words[1:], "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
