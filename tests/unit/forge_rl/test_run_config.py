"""`run` settings: the environment is picked by name from envs.registry."""

from __future__ import annotations

import pytest

from envs.registry import ENVIRONMENTS
from forge_rl.run_config import RunSettings
from infra.settings import load_settings
from schemas.errors import ConfigError


def test_the_task_is_a_registered_environment(monkeypatch):
    assert load_settings(RunSettings).task == "guess" in ENVIRONMENTS
    monkeypatch.setenv("FORGE_RUN_TASK", "chess")
    with pytest.raises(ConfigError, match=r"FORGE_RUN_TASK: .*no environment 'chess'.*guess"):
        load_settings(RunSettings)
