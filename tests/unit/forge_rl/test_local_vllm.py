"""`forge-rl run --engine vllm`'s pieces: the environment check, the untied policy, the
gateway pointed at the server, the settings it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from forge_rl.cli import main
from forge_rl.local_vllm import (
    VllmEnvMissingError,
    gateway_engine,
    require_vllm_python,
    untied_policy,
    vllm_python,
)
from forge_rl.run_config import RunSettings
from gateway.engines.vllm_server import VllmServer
from infra.settings import load_settings
from infra.tiny_model import save_tiny_policy
from schemas.errors import ConfigError


def test_a_missing_vllm_environment_names_the_set_up_script(tmp_path, monkeypatch):
    monkeypatch.setenv("FORGE_VLLM_ENV", str(tmp_path / "vllm"))
    assert vllm_python() is None
    with pytest.raises(VllmEnvMissingError, match=r"vllm\): run scripts/setup_vllm\.sh"):
        require_vllm_python()


def test_run_engine_vllm_without_the_environment_is_one_line_before_anything_starts(tmp_path):
    home = tmp_path / "home"
    env = {"FORGE_HOME": str(home), "FORGE_VLLM_ENV": str(tmp_path / "vllm")}
    result = CliRunner().invoke(main, ["run", "--engine", "vllm", "--fresh"], env=env)
    assert result.exit_code == 1, result.output
    assert result.output.startswith("error: the vLLM environment is not built")
    assert "scripts/setup_vllm.sh" in result.output
    assert not home.exists()  # no broker, no run directory, nothing reset


def test_a_tied_policy_is_served_from_an_untied_copy(tmp_path):
    base = save_tiny_policy(tmp_path / "base")
    before = (base / "model.safetensors").read_bytes()
    copy = untied_policy(base, tmp_path / "base-untied")
    assert copy == tmp_path / "base-untied"
    assert json.loads((copy / "config.json").read_text())["tie_word_embeddings"] is False
    weights = load_file(copy / "model.safetensors")
    torch.testing.assert_close(weights["lm_head.weight"], weights["model.embed_tokens.weight"])
    assert (copy / "tokenizer.json").read_bytes() == (base / "tokenizer.json").read_bytes()
    assert (base / "model.safetensors").read_bytes() == before
    assert untied_policy(copy, tmp_path / "again") == copy  # untied already: served as is
    assert not (tmp_path / "again").exists()


def test_the_gateway_is_pointed_at_the_runs_server_alone(tmp_path):
    server = VllmServer(Path("python"), tmp_path / "base-untied", 8123)
    args, env = gateway_engine(server)
    assert args == ["--engine", "vllm"]
    assert env == {
        "FORGE_GATEWAY_MODEL_DIR": str(tmp_path / "base-untied"),
        "FORGE_GATEWAY_VLLM_URL": "http://127.0.0.1:8123",
        "FORGE_GATEWAY_VLLM_URLS": "[]",
        "FORGE_GATEWAY_SERVED_MODEL_NAME": "forge-policy",
    }


def test_engine_vllm_is_one_server_not_several_embedded_engines():
    assert load_settings(RunSettings, None, "run", {"engine": "vllm"}).engine == "vllm"
    with pytest.raises(ConfigError, match="engine vllm starts one vLLM server"):
        load_settings(RunSettings, None, "run", {"engine": "vllm", "engines": 2})
