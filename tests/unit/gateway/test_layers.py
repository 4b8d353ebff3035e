"""What the pure modules import: recording a call needs neither response rendering nor the
web framework, so the recorder stays a pure core testable on its own."""

from __future__ import annotations

import ast
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


LAYERS = ("api", "call", "engines")
"""gateway's subpackages, each importing only those after it (and the shared modules)."""
SHARED = ("config", "errors", "metrics", "heap")


def _gateway_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gateway"):
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("gateway"))
    return found


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def test_imports_between_the_gateways_subpackages_go_one_way():
    root = Path(__file__).parents[3] / "gateway"
    wrong = []
    for path in root.rglob("*.py"):
        inner = path.relative_to(root).parts
        here = inner[0] if len(inner) > 1 else path.stem
        for module in _gateway_imports(path):
            there = _layer(module)
            if here in SHARED and there is not None:
                wrong.append(f"{path}: shared module imports {module}")
            elif here in LAYERS and there is not None and LAYERS.index(there) < LAYERS.index(here):
                wrong.append(f"{path}: {here} imports {module}")
    assert not wrong, wrong
