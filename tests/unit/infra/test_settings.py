from __future__ import annotations

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
