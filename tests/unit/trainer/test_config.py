"""The trainer's row budget is checked against the longest sequence the gateway may produce."""

from __future__ import annotations

import pytest

from infra.settings import load_settings
from schemas.errors import ConfigError
from trainer.config import TrainerSettings


def test_the_defaults_hold_the_gateways_default_context():
    settings = TrainerSettings()
    assert settings.max_row_tokens >= settings.max_sequence_tokens == 4096


def test_a_row_budget_below_the_longest_sequence_is_one_clear_line(monkeypatch):
    monkeypatch.setenv("FORGE_TRAINER_MAX_SEQUENCE_TOKENS", "8192")
    with pytest.raises(ConfigError) as err:
        load_settings(TrainerSettings)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("FORGE_TRAINER_MAX_ROW_TOKENS:")
    assert "max_row_tokens=4096 cannot hold" in message
    assert "max_sequence_tokens=8192" in message


def test_a_row_budget_at_or_above_the_longest_sequence_is_accepted():
    assert TrainerSettings(max_sequence_tokens=1024, max_row_tokens=1024).max_row_tokens == 1024
    assert TrainerSettings(max_sequence_tokens=64, max_row_tokens=8192).max_row_tokens == 8192


def test_the_loss_defaults_to_cispo_without_a_kl_filter():
    settings = TrainerSettings()
    assert (settings.loss, settings.kl_filter_threshold) == ("cispo", None)
    assert (settings.tis_cap, settings.icepop_low, settings.icepop_high) == (2.0, 0.5, 5.0)


def test_loss_variants_and_their_scalars_are_validated():
    assert TrainerSettings(loss="icepop", icepop_low=0.25, icepop_high=8.0).loss == "icepop"
    assert TrainerSettings(kl_filter_threshold=0.1).kl_filter_threshold == 0.1
    for bad in ({"loss": "ppo"}, {"tis_cap": 0.5}, {"icepop_low": 1.5}, {"icepop_high": 0.9},
                {"kl_filter_threshold": -1.0}):  # fmt: skip
        with pytest.raises(ValueError):
            TrainerSettings(**bad)
