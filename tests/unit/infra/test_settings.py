from __future__ import annotations

from pathlib import Path

import pytest

from infra.config import InfraSettings
from infra.settings import load_settings
from schemas.errors import ConfigError


def test_malformed_env_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("FORGE_KAFKA_PORT", "not-a-port")
    with pytest.raises(ConfigError, match="FORGE_KAFKA_PORT"):
        load_settings(InfraSettings)


def test_malformed_bootstrap_is_rejected(monkeypatch):
    monkeypatch.setenv("FORGE_KAFKA_BOOTSTRAP", "localhost")
    with pytest.raises(ConfigError, match=r"FORGE_KAFKA_BOOTSTRAP: .*host:port"):
        load_settings(InfraSettings)


def test_file_values_apply_and_env_overrides_them(tmp_path, monkeypatch):
    config = tmp_path / "forge.yaml"
    config.write_text("infra:\n  kafka_port: 31000\n  kafka_heap: 256m\n")
    monkeypatch.setenv("FORGE_KAFKA_HEAP", "1g")
    settings = load_settings(InfraSettings, config, "infra")
    assert settings.kafka_port == 31000
    assert settings.kafka_heap == "1g"


def test_bad_value_in_file_names_the_section_key(tmp_path):
    config = tmp_path / "forge.yaml"
    config.write_text("infra:\n  kafka_port: -5\n")
    with pytest.raises(ConfigError, match=r"infra\.kafka_port"):
        load_settings(InfraSettings, config, "infra")


def test_unknown_key_in_file_is_rejected(tmp_path):
    config = tmp_path / "forge.yaml"
    config.write_text("infra:\n  kafka_prot: 1\n")
    with pytest.raises(ConfigError, match="kafka_prot"):
        load_settings(InfraSettings, config, "infra")


def test_invalid_yaml_is_a_config_error(tmp_path):
    config = tmp_path / "forge.yaml"
    config.write_text("infra: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_settings(InfraSettings, config, "infra")


def test_command_line_overrides_win_over_env_and_file(tmp_path, monkeypatch):
    config = tmp_path / "forge.yaml"
    config.write_text("infra:\n  kafka_heap: 256m\n")
    monkeypatch.setenv("FORGE_KAFKA_HEAP", "1g")
    settings = load_settings(InfraSettings, config, "infra", {"kafka_heap": "2g", "home": None})
    assert settings.kafka_heap == "2g"
    assert isinstance(settings, InfraSettings)


def test_bad_override_names_the_flag():
    with pytest.raises(ConfigError, match="--kafka-port"):
        load_settings(InfraSettings, overrides={"kafka_port": -1})


def test_relative_paths_in_a_config_file_are_relative_to_the_file(tmp_path, monkeypatch):
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "forge.yaml").write_text("infra:\n  home: state\n  cache_dir: /abs/cache\n")
    monkeypatch.chdir(tmp_path)
    settings = load_settings(InfraSettings, Path("configs/forge.yaml"), "infra")
    assert settings.home == configs.resolve() / "state"
    assert settings.cache_dir == Path("/abs/cache")


def test_a_home_relative_path_in_a_config_file_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "me"))
    config = tmp_path / "forge.yaml"
    config.write_text("infra:\n  home: ~/forge\n")
    assert load_settings(InfraSettings, config, "infra").home == tmp_path / "me" / "forge"


def test_paths_from_the_environment_stay_relative_to_the_working_directory(tmp_path, monkeypatch):
    config = tmp_path / "configs" / "forge.yaml"
    config.parent.mkdir()
    config.write_text("infra:\n  kafka_heap: 256m\n")
    monkeypatch.setenv("FORGE_HOME", "state")
    assert load_settings(InfraSettings, config, "infra").home == Path("state")
