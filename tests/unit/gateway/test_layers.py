"""What the pure modules import: recording a call needs neither response rendering nor the
web framework, so the recorder stays a pure core testable on its own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROBE = """
import json, sys
import gateway.call.recorder
print(json.dumps(sorted(sys.modules)))
"""


def test_the_recorder_imports_no_response_rendering():
    root = Path(__file__).parents[3]
    run = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=root, capture_output=True, text=True, check=True
    )
    imported = set(json.loads(run.stdout))
    assert "gateway.call.recorder" in imported
    rendering = {"gateway.api.responses", "gateway.errors", "starlette", "fastapi"}
    assert imported.isdisjoint(rendering), imported & rendering
