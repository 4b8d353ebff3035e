from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from forge_rl.cli import main


def all_commands(group: click.Group, prefix: tuple[str, ...] = ()):
    yield prefix
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from all_commands(command, (*prefix, name))
        else:
            yield (*prefix, name)


@pytest.mark.parametrize("path", list(all_commands(main)), ids=" ".join)
def test_every_command_has_help(path):
    result = CliRunner().invoke(main, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_malformed_env_is_a_one_line_error_with_exit_2(tmp_path):
    env = {"FORGE_HOME": str(tmp_path), "FORGE_KAFKA_PORT": "abc"}
    result = CliRunner().invoke(main, ["infra", "status"], env=env)
    assert result.exit_code == 2
    assert "FORGE_KAFKA_PORT" in result.output


def test_status_without_broker_exits_3(tmp_path):
    result = CliRunner().invoke(main, ["infra", "status"], env={"FORGE_HOME": str(tmp_path)})
    assert result.exit_code == 3
    assert "not running" in result.output


def test_unreachable_broker_fails_fast_with_a_clear_error(tmp_path):
    env = {
        "FORGE_HOME": str(tmp_path),
        "FORGE_KAFKA_BOOTSTRAP": "127.0.0.1:1",
        "FORGE_KAFKA_CONNECT_TIMEOUT_S": "2",
    }
    result = CliRunner().invoke(main, ["infra", "up"], env=env)
    assert result.exit_code == 1
    assert "127.0.0.1:1 is unreachable" in result.output


def test_replay_into_the_live_train_topic_is_refused(tmp_path):
    env = {"FORGE_HOME": str(tmp_path), "FORGE_KAFKA_BOOTSTRAP": "127.0.0.1:1"}
    result = CliRunner().invoke(main, ["replay", "--out-topic", "forge.train"], env=env)
    assert result.exit_code == 2
    assert "forge.train is refused" in result.output
