"""Mixed precision from the settings: the DeepSpeed config they build, and fp16 refused on CPU
(DeepSpeed 0.19.8 raises "Type fp16 is not supported on your device"; bf16 trains there)."""

from __future__ import annotations

import pytest

from infra.settings import load_settings
from schemas.errors import ConfigError
from trainer.config import TrainerSettings
from trainer.distributed import deepspeed_config


def test_fp32_is_the_default_and_asks_deepspeed_for_no_mixed_precision():
    config = deepspeed_config(TrainerSettings())
    assert TrainerSettings().precision == "fp32"
    assert "bf16" not in config and "fp16" not in config
    assert config["train_micro_batch_size_per_gpu"] == 1
    assert config["gradient_accumulation_steps"] == 1


def test_bf16_and_fp16_enable_deepspeeds_mixed_precision():
    bf16 = deepspeed_config(TrainerSettings(precision="bf16", device="cpu"))
    assert bf16["bf16"] == {"enabled": True} and "fp16" not in bf16
    fp16 = deepspeed_config(TrainerSettings(precision="fp16", device="cuda"))
    assert fp16["fp16"] == {"enabled": True, "loss_scale": 0}  # 0: dynamic loss scaling
    assert "bf16" not in fp16


def test_the_rest_of_the_config_follows_the_settings():
    config = deepspeed_config(TrainerSettings(zero_stage=2, grad_clip=0.5, precision="bf16"))
    assert config["zero_optimization"] == {"stage": 2}
    assert config["gradient_clipping"] == 0.5


def test_fp16_on_cpu_is_one_clear_config_line(monkeypatch):
    monkeypatch.setenv("FORGE_TRAINER_PRECISION", "fp16")
    with pytest.raises(ConfigError) as err:
        load_settings(TrainerSettings)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("FORGE_TRAINER_PRECISION:")
    assert "fp16 needs device=cuda" in message


def test_an_unknown_precision_is_refused(monkeypatch):
    monkeypatch.setenv("FORGE_TRAINER_PRECISION", "fp8")
    with pytest.raises(ConfigError, match="FORGE_TRAINER_PRECISION"):
        load_settings(TrainerSettings)


@pytest.mark.parametrize(("precision", "device"), [("bf16", "cpu"), ("fp16", "cuda:1")])
def test_supported_combinations_are_accepted(precision, device):
    assert TrainerSettings(precision=precision, device=device).precision == precision
