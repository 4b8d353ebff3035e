"""Supervised children: logs in files, an ended child is seen, stop reaches process groups."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from forge_rl.run_config import RunSettings
from forge_rl.supervisor import Supervisor
from infra.settings import load_settings
from schemas.errors import ConfigError


def test_a_child_logs_to_its_file_and_an_ended_child_is_reported(tmp_path):
    supervisor = Supervisor(tmp_path, os.environ)
    code = "print('hello'); raise SystemExit(4)"
    child = supervisor.start("worker", [sys.executable, "-c", code])
    deadline = time.monotonic() + 30
    while not supervisor.exited() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert supervisor.exited() == [child] and child.process.returncode == 4
    assert child.tail() == "hello"


def test_stop_all_terminates_children_and_their_own_children(tmp_path):
    supervisor = Supervisor(tmp_path, os.environ)
    script = "import subprocess, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"
    child = supervisor.start("parent", [sys.executable, "-c", script])
    deadline = time.monotonic() + 30
    while not psutil.Process(child.process.pid).children() and time.monotonic() < deadline:
        time.sleep(0.05)
    (grandchild,) = psutil.Process(child.process.pid).children()
    assert not supervisor.exited()
    assert supervisor.stop_all(timeout_s=10) == {"parent": -15}
    _, alive = psutil.wait_procs([grandchild], timeout=10)
    assert not alive


def test_a_group_must_fit_in_the_fleet():
    with pytest.raises(ConfigError, match=r"agents \(2\) must be at least group_size"):
        load_settings(RunSettings, None, "run", {"agents": 2, "group_size": 4})


def test_an_adopted_process_is_watched_and_stopped_with_the_children(tmp_path):
    supervisor = Supervisor(tmp_path, os.environ)
    process = subprocess.Popen(["sleep", "60"], start_new_session=True)
    child = supervisor.adopt("server", process, tmp_path / "server.log")
    assert supervisor.children == [child] and not supervisor.exited()
    assert supervisor.stop_all(timeout_s=10) == {"server": -15}


def test_an_adopted_server_is_stopped_only_after_the_children_that_call_it(tmp_path):
    marker, seen = tmp_path / "child-ended", tmp_path / "seen"
    on_term = (
        "import signal, sys, time\ndef stop(*_):\n    {}\n    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\nprint('ready', flush=True)\ntime.sleep(60)\n"
    )
    child_code = on_term.format(f"time.sleep(0.5); open({str(marker)!r}, 'w').close()")
    server_code = on_term.format(
        f"import os; open({str(seen)!r}, 'w').write(str(os.path.exists({str(marker)!r})))"
    )
    supervisor = Supervisor(tmp_path, os.environ)
    server = subprocess.Popen([sys.executable, "-c", server_code], stdout=subprocess.PIPE,
                              start_new_session=True)  # fmt: skip
    supervisor.adopt("server", server, tmp_path / "server.log")
    child = supervisor.start("caller", [sys.executable, "-c", child_code])
    assert server.stdout is not None and server.stdout.readline() == b"ready\n"
    deadline = time.monotonic() + 30
    while "ready" not in child.tail() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert supervisor.stop_all(timeout_s=10) == {"caller": 0, "server": 0}
    assert seen.read_text() == "True"
