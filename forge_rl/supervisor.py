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

import httpx

from schemas.errors import ForgeError


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    stop_last: bool = False

    def tail(self, lines: int = 15) -> str:
        return log_tail(self.log_path, lines)


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
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

    def adopt(self, name: str, process: subprocess.Popen[bytes], log_path: Path) -> Child:
        """A server started elsewhere in a session of its own (the vLLM server), watched with
        the children; stopped after them, once nothing calls it any more."""
        child = Child(name, process, log_path, stop_last=True)
        self.children.append(child)
        return child

    def exited(self) -> list[Child]:
        """Children that have ended: while a run is on, any of them is a failure."""
        return [c for c in self.children if c.process.poll() is not None]

    def stop_all(self, timeout_s: float = 20.0) -> dict[str, int]:
        """SIGTERM the children (each whole process group), then the adopted servers they
        called; SIGKILL what outlives ``timeout_s`` of its turn. Exit codes by name."""
        codes: dict[str, int] = {}
        try:
            self._stop_turn([c for c in self.children if not c.stop_last], timeout_s, codes)
        finally:  # a second Ctrl-C during the first turn must not leave a server running
            self._stop_turn([c for c in self.children if c.stop_last], timeout_s, codes)
        return codes

    @staticmethod
    def _stop_turn(turn: list[Child], timeout_s: float, codes: dict[str, int]) -> None:
        for child in turn:
            _signal_group(child.process, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for child in turn:
            try:
                codes[child.name] = child.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(child.process, signal.SIGKILL)
                codes[child.name] = child.process.wait()


def _signal_group(process: subprocess.Popen[bytes], sig: int) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)


class ChildCrashedError(ForgeError):
    """A supervised service ended while the run was on."""


def wait_ready(supervisor: Supervisor, url: str, deadline: float) -> None:
    """Until ``url`` answers below 500; a child that exits meanwhile is a crash."""
    while time.monotonic() < deadline:
        raise_if_exited(supervisor)
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise ForgeError(f"{url} did not come up in time (see the logs)")


def raise_if_exited(supervisor: Supervisor) -> None:
    for child in supervisor.exited():
        raise ChildCrashedError(crash_message(child))


def crash_message(child: Child) -> str:
    return (
        f"{child.name} exited with code {child.process.returncode}; "
        f"its log {child.log_path} ends with:\n{child.tail()}"
    )
