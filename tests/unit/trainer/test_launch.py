"""The trainer's command line for N ranks on this machine."""

from __future__ import annotations

import pytest

from trainer.launch import launched_rank, trainer_command

CLI = ["/venv/bin/python", "-m", "forge_rl.cli", "--config", "run.yaml"]


def test_one_rank_is_the_cli_itself():
    assert trainer_command(CLI, 1) == [*CLI, "trainer"]


def test_more_ranks_run_the_same_cli_under_torchrun_through_our_launcher():
    assert trainer_command(CLI, 2) == [
        "/venv/bin/python", "-m", "trainer.rank_launcher", "--standalone", "--nproc-per-node=2",
        "-m", "forge_rl.cli", "--config", "run.yaml", "trainer",
    ]  # fmt: skip


def test_no_ranks_is_refused():
    with pytest.raises(ValueError, match="at least one rank"):
        trainer_command(CLI, 0)


def test_the_rank_comes_from_the_launcher(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    assert launched_rank() == 0
    monkeypatch.setenv("RANK", "3")
    assert launched_rank() == 3
