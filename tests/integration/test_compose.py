from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose not installed")
def test_compose_file_validates():
    result = subprocess.run(
        ["docker-compose", "-f", str(ROOT / "docker-compose.yml"), "config", "-q"],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def test_compose_defines_the_stack():
    import yaml

    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    assert {"kafka", "clickhouse", "gateway", "streams", "trainer", "vllm"} <= set(services)
    assert services["vllm"]["profiles"] == ["gpu"]
    for name in ("kafka", "clickhouse", "gateway", "streams", "vllm"):
        assert "healthcheck" in services[name], name
