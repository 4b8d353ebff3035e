"""Installs by role: the gateway and the streams worker run without the trainer's and the
report's extras (DeepSpeed, matplotlib), and a command that needs one names it.

Each check runs in a fresh interpreter where the extras cannot be imported (``None`` in
``sys.modules`` is how Python marks a module as absent), so what the role imports at start-up
is what is tested, not what this test process happens to have imported already.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
EXTRAS_ABSENT = (
    "import sys\nfor name in ('deepspeed', 'matplotlib'):\n    sys.modules[name] = None\n"
)


def without_extras(code: str) -> subprocess.CompletedProcess[str]:
    program = EXTRAS_ABSENT + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120
    )


def test_the_gateway_and_the_streams_worker_start_without_the_extras():
    done = without_extras("""
        import forge_rl.cli, forge_rl.cli_services, gateway.server, gateway.app, streams.app
        from gateway.engines.vllm_engine import VllmEngine
        print("role modules imported")
        for extra in ("deepspeed", "matplotlib"):
            try:
                __import__(extra)
            except ImportError:
                print(extra, "absent")
    """)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:3] == [
        "role modules imported",
        "deepspeed absent",
        "matplotlib absent",
    ]


@pytest.mark.parametrize(
    ("argv", "extra"),
    [(["trainer"], "forge-rl[trainer]"), (["report", "--out", "pictures"], "forge-rl[plots]")],
)
def test_a_command_that_needs_an_extra_names_it(argv, extra, tmp_path):
    done = without_extras(f"""
        import os
        os.environ["FORGE_HOME"] = {str(tmp_path)!r}
        os.environ["FORGE_KAFKA_BOOTSTRAP"] = "127.0.0.1:1"
        os.environ["COLUMNS"] = "300"  # one line, as a terminal this wide shows it
        from forge_rl.cli import main
        main({argv!r})
    """)
    assert done.returncode != 0
    assert extra in done.stdout + done.stderr, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def test_the_core_install_leaves_the_extras_to_their_roles():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"])
    assert "deepspeed" not in core and "matplotlib" not in core
    extras = project["optional-dependencies"]
    assert any(d.startswith("deepspeed") for d in extras["trainer"])
    assert any(d.startswith("matplotlib") for d in extras["plots"])
    assert extras["all"] == ["forge-rl[trainer,plots,tracking]"]
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert '-e ".[all,dev]"' in setup  # the README's two commands install everything
