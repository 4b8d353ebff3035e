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


def test_an_agent_command_for_one_domain_leaves_the_others_their_built_in_agent():
    overrides = {"domains": {"guess": "guess", "echo": "echo"}, "agent_cmds": {"guess": "my-agent"}}
    settings = load_settings(RunSettings, overrides=overrides)
    assert (settings.agent_command("guess"), settings.agent_command("echo")) == ("my-agent", None)
    everywhere = load_settings(RunSettings, overrides={**overrides, "agent_cmd": "any-agent"})
    assert everywhere.agent_command("guess") == "my-agent"  # the domain's own wins
    assert everywhere.agent_command("echo") == "any-agent"


def test_an_agent_command_for_a_domain_not_played_is_refused_by_name():
    overrides = {"domains": {"guess": "guess"}, "agent_cmds": {"gues": "my-agent"}}
    with pytest.raises(ConfigError, match=r"agent_cmds names 'gues', not a domain .*\(guess\)"):
        load_settings(RunSettings, overrides=overrides)
