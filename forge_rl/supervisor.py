"""Child services of a run: started with their logs in files, watched, stopped in order."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class Supervisor:
    def __init__(self, log_dir: Path, env: Mapping[str, str]) -> None:
        self.log_dir = log_dir
        self.env = dict(env)
        self.children: list[Child] = []

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> Child:
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("ab") as log:
            # Own session: the terminal's Ctrl-C reaches the runner only, which stops the
            # children in order instead of all of them dying at once.
            process = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**self.env, **(env or {})},
                start_new_session=True,
            )
        child = Child(name, process, log_path)
        self.children.append(child)
        return child

    def exited(self) -> list[Child]:
        """Children that have ended: while a run is on, any of them is a failure."""
        return [c for c in self.children if c.process.poll() is not None]

    def stop_all(self, timeout_s: float = 20.0) -> dict[str, int]:
        """SIGTERM every child (its whole process group), SIGKILL what outlives the timeout."""
        for child in self.children:
            _signal_group(child.process, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        codes = {}
        for child in self.children:
            try:
                codes[child.name] = child.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(child.process, signal.SIGKILL)
                codes[child.name] = child.process.wait()
        return codes


def _signal_group(process: subprocess.Popen[bytes], sig: int) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)
