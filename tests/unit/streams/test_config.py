"""The pipeline file and the worker's settings: every problem is one line naming its source."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.settings import load_settings
from schemas.errors import ConfigError
from streams.config import StreamsSettings, load_pipeline_config

LONG_KEY = "s" * 16


def pipeline(tmp_path, text: str):
    path = tmp_path / "pipeline.yaml"
    path.write_text(text)
    return path


def test_a_pipeline_file_named_in_a_config_file_is_found_beside_it(tmp_path, monkeypatch):
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "pipeline.yaml").write_text("window: 16\nitem_timeout_s: 120\ngroup_timeout_s: 60\n")
    (configs / "forge.yaml").write_text("streams:\n  pipeline_file: pipeline.yaml\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    settings = load_settings(StreamsSettings, Path("../configs/forge.yaml"), "streams")
    assert settings.pipeline_file == (configs / "pipeline.yaml").resolve()
    assert load_pipeline_config(settings.pipeline_file).window == 16


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("item_timeout_s: 60\ngroup_timeout_s: 120\n",
         r"item_timeout_s \(60\) must be at least group_timeout_s \(120\)"),
        ("rewards:\n  speed_weight: .nan\n", r"speed_weight must be a finite number \(got nan\)"),
        ("rewards:\n  outcome_weight: .inf\n", r"outcome_weight must be a finite number"),
        ("group_timeout_s: .inf\nitem_timeout_s: null\n", r"group_timeout_s: .*finite"),
        ("window: 0\n", r"window: .*greater than or equal to 1"),
        ("windw: 3\n", r"windw: Extra inputs"),
        ("window: [unclosed\n", r"not valid YAML"),
    ],
)  # fmt: skip
def test_a_bad_pipeline_file_is_one_line_naming_it(tmp_path, text, message):
    path = pipeline(tmp_path, text)
    with pytest.raises(ConfigError, match=message) as caught:
        load_pipeline_config(path)
    assert str(caught.value).startswith(f"pipeline file {path}: ")
    assert "\n" not in str(caught.value)


def test_a_missing_pipeline_file_is_one_line_naming_it(tmp_path):
    missing = tmp_path / "nowhere.yaml"
    with pytest.raises(ConfigError, match=f"^pipeline file {missing}: No such file"):
        load_pipeline_config(missing)


def test_item_timeout_equal_to_or_past_the_group_timeout_is_accepted(tmp_path):
    assert load_pipeline_config(pipeline(tmp_path, "item_timeout_s: 60\ngroup_timeout_s: 60\n"))
    assert load_pipeline_config(pipeline(tmp_path, "item_timeout_s: null\n")).item_timeout_s is None


def test_the_web_port_listens_on_loopback_unless_configured(monkeypatch):
    settings = load_settings(StreamsSettings)
    assert settings.web_bind == "127.0.0.1"
    assert settings.local_url == f"http://127.0.0.1:{settings.web_port}"
    monkeypatch.setenv("FORGE_STREAMS_WEB_BIND", "0.0.0.0")
    assert load_settings(StreamsSettings).local_url.startswith("http://127.0.0.1:")
    monkeypatch.setenv("FORGE_STREAMS_WEB_BIND", "::1")
    assert load_settings(StreamsSettings).local_url.startswith("http://[::1]:")


def test_a_short_sql_key_is_refused(monkeypatch):
    monkeypatch.setenv("FORGE_STREAMS_SQL_KEY", "short")
    with pytest.raises(ConfigError, match=r"FORGE_STREAMS_SQL_KEY: .*16 characters"):
        load_settings(StreamsSettings)
    monkeypatch.setenv("FORGE_STREAMS_SQL_KEY", LONG_KEY)
    assert load_settings(StreamsSettings).sql_key.get_secret_value() == LONG_KEY
