"""Pipeline settings from a YAML file (reward weights, window, timeouts), and the worker's."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_settings import SettingsConfigDict

from infra.settings import ForgeSettings
from schemas.errors import ConfigError
from schemas.topics import EVENTS, METRICS, POLICY, QUEUE, TRAIN, TRAJECTORIES
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


class StreamsSettings(ForgeSettings):
    """The live worker (env prefix FORGE_STREAMS_, config-file section `streams`)."""

    model_config = SettingsConfigDict(env_prefix="FORGE_STREAMS_", extra="forbid")

    app_id: str = Field(default="forge-streams", pattern=r"^[A-Za-z0-9._-]+$")
    events_topic: str = EVENTS.name
    queue_topic: str = QUEUE.name
    trajectories_topic: str = TRAJECTORIES.name
    train_topic: str = TRAIN.name
    policy_topic: str = POLICY.name
    metrics_topic: str = METRICS.name
    pipeline_file: Path | None = Field(
        default=None, description="YAML with reward weights, window and timeouts."
    )
    web_port: int = Field(default=6066, ge=1, le=65535, description="Read-only analytics queries.")
    lateness_s: float = Field(
        default=5.0, ge=0, description="Watermark lag behind the newest fact."
    )
    idle_flush_s: float = Field(default=3.0, gt=0, description="Apply all facts after this idle.")
    live_within_s: float = Field(
        default=30.0,
        gt=0,
        description="A group completed this recently means upstream has no backlog: go live.",
    )
    group_check_s: float = Field(
        default=2.0, gt=0, description="How often open groups are checked against their timeout."
    )
    sink_flush_s: float = Field(
        default=1.0, gt=0, description="Analytics rows are batched for at most this long."
    )
    sink: bool = Field(default=True, description="Fill the rollouts and calls tables.")

    @property
    def sequencer_flush_s(self) -> float:
        """The sequencer's quiet period outlasts the assembler's plus one timeout check, so the
        groups timed out at the end of the log are scored before everything is applied."""
        return 2 * self.idle_flush_s + self.group_check_s
