"""Trainer settings (env prefix FORGE_TRAINER_, config-file section `trainer`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from infra.settings import ForgeSettings
from schemas.topics import METRICS, POLICY, TRAIN


class TrainerSettings(ForgeSettings):
    model_config = SettingsConfigDict(env_prefix="FORGE_TRAINER_", extra="forbid")

    topic: str = Field(default=TRAIN.name, description="Ordered samples: forge.train or a replay.")
    metrics_topic: str = METRICS.name
    policy_topic: str = POLICY.name
    base_model: Path | None = Field(
        default=None, description="HF model dir of the initial policy; None builds the tiny one."
    )
    checkpoint_dir: Path | None = Field(
        default=None,
        description="DeepSpeed checkpoints (with consumer offset); default under FORGE_HOME.",
    )
    policy_dir: Path | None = Field(
        default=None, description="Exported weights per policy version, read by the engine."
    )
    keep_policies: int = Field(default=3, ge=1, description="Exported versions kept on disk.")
    batch_size: int = Field(default=8, ge=1, description="Samples (trajectories) per step.")
    max_steps: int | None = Field(default=None, ge=1, description="Stop after this many steps.")
    lr: float = Field(default=1e-4, gt=0)
    weight_decay: float = Field(default=0.0, ge=0)
    grad_clip: float = Field(default=1.0, gt=0)
    eps_high: float = Field(default=2.0, gt=0, description="CISPO upper clip of the IS weight.")
    zero_stage: int = Field(default=0, ge=0, le=3)
    max_row_tokens: int = Field(default=4096, ge=16, description="Unique tokens per packed row.")
    use_flex: bool = Field(default=False, description="flex_attention tree mask (CUDA only).")
    device: str = Field(default="cpu", pattern=r"^(cpu|cuda(:\d+)?)$")
    seed: int = 0
    poll_timeout_s: float = Field(default=1.0, gt=0)
    idle_exit_s: float | None = Field(
        default=None, gt=0, description="Exit when no sample arrives for this long (offline runs)."
    )

    @model_validator(mode="after")
    def _flex_needs_cuda(self) -> TrainerSettings:
        if self.use_flex and not self.device.startswith("cuda"):
            raise ValueError("use_flex needs device=cuda: flex_attention has no CPU backward")
        return self
