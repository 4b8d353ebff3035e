"""The initial policy is a local HF directory or a Hub id; only the project's own default builds
the tiny model, and a Hub id that cannot be had is one line naming it, with nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
from huggingface_hub import constants

from infra.tiny_model import save_tiny_policy
from schemas.errors import ConfigError, ForgeError
from trainer.base_model import ModelUnavailableError, resolve_base_model

HUB_ID = "someorg/not-cached-model"


@pytest.fixture
def offline_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HF_HUB_OFFLINE=1 with an empty cache, run from an empty working directory."""
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return cache


def test_an_uncached_hub_id_offline_is_one_line_naming_it_and_writes_nothing(offline_hub, tmp_path):
    with pytest.raises(ModelUnavailableError) as err:
        resolve_base_model(HUB_ID, tmp_path / "home")
    message = str(err.value)
    assert "\n" not in message
    assert HUB_ID in message and "HF_HUB_OFFLINE" in message
    assert err.value.name == HUB_ID
    assert isinstance(err.value, ForgeError)  # the CLI prints it as one line, exit code 1
    assert list(Path.cwd().iterdir()) == []  # no tiny model at ./someorg/not-cached-model
    assert not (tmp_path / "home").exists()
    assert list(offline_hub.iterdir()) == []


def test_a_cached_hub_id_resolves_offline_to_its_snapshot(offline_hub, tmp_path):
    repo = offline_hub / "models--someorg--cached-model"
    snapshot = save_tiny_policy(repo / "snapshots" / ("ab" * 20))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("ab" * 20)
    assert resolve_base_model("someorg/cached-model", tmp_path / "home") == snapshot


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("/no/such/model/dir", "no such directory, and not a Hub id"),
        ("./not/a-hub-id", "no such directory, and not a Hub id"),
    ],
)
def test_a_missing_path_that_is_no_hub_id_is_a_config_error(offline_hub, tmp_path, name, expected):
    with pytest.raises(ConfigError, match=expected) as err:
        resolve_base_model(name, tmp_path / "home")
    assert "\n" not in str(err.value) and name in str(err.value)
    assert list(Path.cwd().iterdir()) == []


def test_a_local_directory_that_is_no_model_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"without config\.json"):
        resolve_base_model(str(tmp_path / "empty"), tmp_path / "home")
    assert list((tmp_path / "empty").iterdir()) == []  # nothing built into it


def test_a_local_model_directory_is_used_as_it_is(tmp_path):
    local = save_tiny_policy(tmp_path / "mine")
    before = sorted(p.name for p in local.iterdir())
    assert resolve_base_model(str(local), tmp_path / "home") == local
    assert sorted(p.name for p in local.iterdir()) == before
    assert not (tmp_path / "home").exists()


def test_only_the_default_builds_the_tiny_policy_once_in_forge_home(tmp_path):
    home = tmp_path / "home"
    base = resolve_base_model(None, home)
    assert base == home / "policies" / "base"
    assert (base / "config.json").is_file() and (base / "tokenizer.json").is_file()
    written = (base / "model.safetensors").stat().st_mtime_ns
    assert resolve_base_model(None, home) == base
    assert (base / "model.safetensors").stat().st_mtime_ns == written
    assert [p.name for p in (home / "policies").iterdir()] == ["base"]  # no temp dir left
