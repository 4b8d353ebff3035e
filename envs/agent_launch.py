"""Running one agent episode as its own process: env vars in, last stdout line and exit code out.

Two launchers honour the same contract. ``CommandLauncher`` runs any program (the black-box
path, ``--agent-cmd``). ``ForkedLauncher`` runs the built-in agent in processes forked from a
server that has already imported the OpenAI SDK: importing it costs ~1.3 s of CPU, which
would otherwise dominate a tiny model's episode on two cores.

Both give the agent ``agent_environment(episode)``, never the runner's environment as it is:
the runner holds the gateway admin key, and an agent is untrusted code.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import multiprocessing
import os
import signal
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class AgentExit:
    code: int
    """Exit status; -N for a signal, as subprocess reports it."""
    stdout: str
    stderr: str

    @property
    def last_line(self) -> str:
        lines = [line for line in self.stdout.splitlines() if line.strip()]
        return lines[-1] if lines else ""


EPISODE_VARIABLES = frozenset({"FORGE_TASK", "FORGE_ROLLOUT_ID"})
"""The FORGE_* names an episode may hand its agent: the agent contract, no secrets."""


def agent_environment(episode: Mapping[str, str]) -> dict[str, str]:
    """This process's environment without forge's own variables, then ``episode`` on top.

    Forge's own variables are all names starting with FORGE_, in any case: every service reads
    its settings (the admin key, URLs with passwords) from that prefix, case-insensitively, as
    pydantic-settings does. The whole prefix goes, not a guess at names with KEY or TOKEN in
    them, and nothing else does: PATH, HOME, LANG, VIRTUAL_ENV, proxies or the operator's own
    tool keys are the agent's to use. ``episode`` (OPENAI_BASE_URL, OPENAI_API_KEY, FORGE_TASK,
    ...) is set after the scrub; a FORGE_* name in it outside EPISODE_VARIABLES is dropped too,
    so a caller passing ``{**os.environ, ...}`` leaks nothing either. This governs what an agent
    is given; it is no sandbox: a process of the same user can read /proc/PID/environ, a forked
    agent's own included (the fork server's environment from when it started).
    """
    env = {k: v for k, v in os.environ.items() if not _forge_owned(k)}
    env.update({k: v for k, v in episode.items() if k in EPISODE_VARIABLES or not _forge_owned(k)})
    return env


def _forge_owned(name: str) -> bool:
    return name.upper().startswith("FORGE_")


class Launcher(Protocol):
    async def run(self, env: Mapping[str, str], timeout_s: float) -> AgentExit:
        """Run one episode; ``env`` is the episode's variables (see ``agent_environment``)."""
        ...


class CommandLauncher:
    """Runs a shell command line per episode with the episode's environment."""

    def __init__(self, command: str, cwd: Path | None = None) -> None:
        self.command = command
        self.cwd = cwd

    async def run(self, env: Mapping[str, str], timeout_s: float) -> AgentExit:
        proc = await asyncio.create_subprocess_shell(
            self.command,
            env=agent_environment(env),
            cwd=self.cwd,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # the agent and its children die together on timeout
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
        except (TimeoutError, asyncio.CancelledError):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            if proc.returncode is None:
                raise
            return AgentExit(proc.returncode, "", f"killed after {timeout_s:.0f} s")
        assert proc.returncode is not None
        return AgentExit(
            proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")
        )


def _forked_main(target: Callable[[], None], env: dict[str, str], conn: Connection) -> None:
    # The fork server copied the runner's environment when it started: replace it whole.
    os.environ.clear()
    os.environ.update(env)
    out, err, code = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            target()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
            code = 1
    conn.send((code, out.getvalue(), err.getvalue()))
    conn.close()


_PRELOADED: set[str] = set()
"""Modules the process's fork server imports before it forks an agent."""


class ForkedLauncher:
    """Runs ``target`` in a fresh process per episode, forked from a preloaded server."""

    def __init__(self, target: Callable[[], None], preload: list[str]) -> None:
        self.target = target
        self.context = multiprocessing.get_context("forkserver")
        # One fork server serves every launcher of the process (a run over several domains
        # has one per environment): it preloads what all of them asked for, not the last's.
        _PRELOADED.update(preload)
        self.context.set_forkserver_preload(sorted(_PRELOADED))

    async def run(self, env: Mapping[str, str], timeout_s: float) -> AgentExit:
        receive, send = self.context.Pipe(duplex=False)
        process = self.context.Process(
            target=_forked_main, args=(self.target, agent_environment(env), send), daemon=True
        )
        process.start()
        send.close()
        try:
            ready = await asyncio.to_thread(receive.poll, timeout_s)
            if not ready:
                process.kill()
                return AgentExit(-signal.SIGKILL, "", f"killed after {timeout_s:.0f} s")
            try:
                code, out, err = receive.recv()
            except EOFError:  # died without a word: a crash
                await asyncio.to_thread(process.join, 5)
                return AgentExit(process.exitcode or -1, "", "agent process died")
            return AgentExit(code, out, err)
        finally:
            if process.is_alive():
                process.kill()
            receive.close()
            await asyncio.to_thread(process.join, 5)
