"""Pipeline settings from a YAML file (reward weights, window, timeouts), and the worker's."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from infra.settings import ForgeSettings
from schemas.pipeline_file import read_pipeline_file
from schemas.topics import EVENTS, METRICS, POLICY, QUEUE, TRAIN, TRAJECTORIES
from streams.pipeline_config import PipelineConfig


def load_pipeline_config(path: Path | None) -> PipelineConfig:
    """The pipeline file's settings, or the defaults without one; any problem with the file is
    a one-line ``ConfigError`` naming it."""
    if path is None:
        return PipelineConfig()
    parsed = read_pipeline_file(path)
    return PipelineConfig(
        rewards=parsed.rewards,
        tool_rewards=parsed.tool_rewards,
        window=parsed.window,
        adaptive_window=parsed.adaptive_window,
        item_timeout_s=parsed.item_timeout_s,
        group_timeout_s=parsed.group_timeout_s,
        max_staleness=parsed.max_staleness,
        drop_uniform_groups=parsed.drop_uniform_groups,
        domains=parsed.resolved_domains(),
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
    web_bind: str = Field(
        default="127.0.0.1",
        description="Interface the web port listens on; 0.0.0.0 opens it (and Faust's own "
        "unauthenticated views) to the network.",
    )
    sql_key: SecretStr | None = Field(
        default=None,
        description="Bearer key of /query/ (set it for clients on other machines); unset, a "
        "random one each start. Either is written 0600 to FORGE_HOME for local clients.",
    )
    sql_timeout_s: float = Field(
        default=30.0, gt=0, description="A /query/ query is stopped after this long."
    )
    sql_max_rows: int = Field(default=100_000, ge=1, description="Larger /query/ results fail.")
    lateness_s: float = Field(
        default=5.0, ge=0, description="Watermark lag behind the newest fact."
    )
    idle_flush_s: float = Field(default=3.0, gt=0, description="Apply all facts after this idle.")
    group_check_s: float = Field(
        default=2.0, gt=0, description="How often open groups are checked against their timeout."
    )
    sink_flush_s: float = Field(
        default=1.0, gt=0, description="Analytics rows are batched for at most this long."
    )
    sink: bool = Field(default=True, description="Fill the rollouts and calls tables.")
    max_unwritten_rollouts: int = Field(
        default=10_000,
        ge=1,
        description="An events partition is read no further while more of its scored rollouts "
        "than this wait for their transaction: a worker behind a backlog holds this much of it, "
        "not all of it.",
    )
    stall_limit_s: float = Field(
        default=120.0,
        gt=0,
        description="A stage whose every attempt has failed this long is reported stalled "
        "(/health 503, the run's progress line).",
    )
    stop_timeout_s: float = Field(
        default=30.0, gt=0, description="After SIGTERM, exit with status 1 if not stopped by then."
    )

    @field_validator("sql_key")
    @classmethod
    def _long_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < 16:
            raise ValueError("must be at least 16 characters")
        return value

    @property
    def local_url(self) -> str:
        """Where a process on this machine reaches the web port."""
        host = "127.0.0.1" if self.web_bind in ("", "0.0.0.0", "::") else self.web_bind
        return (
            f"http://[{host}]:{self.web_port}" if ":" in host else f"http://{host}:{self.web_port}"
        )

    @property
    def sequencer_flush_s(self) -> float:
        """The sequencer's quiet period outlasts the worker's plus one timeout check, so the
        groups timed out at the end of the log are scored before everything is applied: quiet,
        then two rounds of watermarks (``streams.event_time.watermarks``) and the check that settles
        them."""
        return 2 * self.idle_flush_s + 3 * self.group_check_s
