"""Pipeline settings from a YAML file (reward weights, window, timeouts)."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from schemas.errors import ConfigError
from streams.pipeline import PipelineConfig
from streams.rewards import RewardConfig


class PipelineFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rewards: RewardConfig = Field(default_factory=RewardConfig)
    window: int | None = Field(default=64, ge=1)
    item_timeout_s: float | None = Field(default=900.0, gt=0)
    group_timeout_s: float = Field(default=900.0, gt=0)
    max_staleness: int | None = Field(default=None, ge=0)


def load_pipeline_config(path: Path | None) -> PipelineConfig:
    if path is None:
        return PipelineConfig()
    try:
        parsed = PipelineFile.model_validate(yaml.safe_load(path.read_text()) or {})
    except (yaml.YAMLError, ValidationError) as exc:
        first = str(exc).splitlines()
        raise ConfigError(f"{path}: {' '.join(first[:3])}") from exc
    return PipelineConfig(
        rewards=parsed.rewards,
        window=parsed.window,
        item_timeout_s=parsed.item_timeout_s,
        group_timeout_s=parsed.group_timeout_s,
        max_staleness=parsed.max_staleness,
    )
