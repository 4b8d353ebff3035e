"""Supervised children: logs in files, an ended child is seen, stop reaches process groups."""

from __future__ import annotations

import os
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
