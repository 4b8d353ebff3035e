"""Trainer settings (env prefix FORGE_TRAINER_, config-file section `trainer`).

Where a run writes follows from its input ``topic`` (rule in ``trainer/outputs.py``):

- the live input, forge.train, publishes to forge.policy and forge.metrics and keeps its
  weights and checkpoints in ``$FORGE_HOME/policies`` and ``$FORGE_HOME/trainer/checkpoints``
  — what the gateway and ``forge-rl run`` follow;
- any other input T (a replay, an offline experiment) publishes to ``T.policy`` and
  ``T.metrics`` (created on start, configured like forge.policy and forge.metrics) and keeps
  its files in ``$FORGE_HOME/offline/T/{policies,checkpoints}``. Nothing live sees its weights,
  and it never resumes from the live run's checkpoint.

``policy_topic``, ``metrics_topic``, ``policy_dir`` and ``checkpoint_dir`` override the derived
names; an offline run refuses any live topic (forge.*) and the live run's directories.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from infra.settings import ForgeSettings
from schemas.topics import TRAIN

KAFKA_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


class TrainerSettings(ForgeSettings):
    model_config = SettingsConfigDict(env_prefix="FORGE_TRAINER_", extra="forbid")

    topic: str = Field(default=TRAIN.name, description="Ordered samples: forge.train or a replay.")
    metrics_topic: str | None = Field(
        default=None, description="TrainStep records; default forge.metrics, or <topic>.metrics."
    )
    policy_topic: str | None = Field(
        default=None, description="PolicyUpdated records; default forge.policy, or <topic>.policy."
    )
    base_model: str | None = Field(
        default=None,
        description="Initial policy: a local Hugging Face model directory (relative to the "
        "working directory) or a Hub id (org/name); None builds the tiny one in FORGE_HOME.",
    )
    checkpoint_dir: Path | None = Field(
        default=None,
        description="DeepSpeed checkpoints (with consumer offset); default under FORGE_HOME.",
    )
    policy_dir: Path | None = Field(
        default=None, description="Exported weights per policy version, read by the engine."
    )
    keep_policies: int = Field(
        default=3,
        ge=2,
        description="Exported versions (and checkpoints) kept on disk, pruned after each new "
        "version is announced: at least the newest announced and the one an engine may still "
        "be loading.",
    )
    batch_size: int = Field(default=8, ge=1, description="Samples (trajectories) per step.")
    max_steps: int | None = Field(default=None, ge=1, description="Stop after this many steps.")
    lr: float = Field(default=1e-4, gt=0)
    weight_decay: float = Field(default=0.0, ge=0)
    grad_clip: float = Field(default=1.0, gt=0)
    loss: Literal["cispo", "tis", "icepop"] = Field(
        default="cispo",
        description="Policy-loss variant (formulas in trainer/losses.py): cispo clips the "
        "importance weight r at 1+eps_high; tis truncates it at tis_cap; icepop zeroes tokens "
        "whose r leaves [icepop_low, icepop_high].",
    )
    eps_high: float = Field(default=2.0, gt=0, description="CISPO upper clip of the IS weight.")
    tis_cap: float = Field(
        default=2.0, ge=1.0, description="tis: cap C of the weight min(r, C) (Yao et al.: 2)."
    )
    icepop_low: float = Field(
        default=0.5, gt=0, le=1.0, description="icepop: lower edge of the kept band of r."
    )
    icepop_high: float = Field(
        default=5.0, ge=1.0, description="icepop: upper edge of the kept band of r."
    )
    kl_filter_threshold: float | None = Field(
        default=None,
        ge=0,
        description="Drop, before the loss, every sample whose mean per-token k3 estimate of "
        "KL(behaviour || current policy) exceeds this (costs one no-grad forward); None keeps all.",
    )
    zero_stage: int = Field(default=0, ge=0, le=3)
    max_sequence_tokens: int = Field(
        default=4096,
        ge=16,
        description="Longest call (prompt + completion) the samples may hold: set it to the "
        "gateway's max_context_tokens. max_row_tokens must be at least this.",
    )
    max_row_tokens: int = Field(
        default=4096,
        ge=16,
        description="Unique tokens per packed row; a longer call is dead-lettered, not trained.",
    )
    use_flex: bool = Field(default=False, description="flex_attention tree mask (CUDA only).")
    device: str = Field(default="cpu", pattern=r"^(cpu|cuda(:\d+)?)$")
    precision: Literal["fp32", "bf16", "fp16"] = Field(
        default="fp32",
        description="DeepSpeed mixed precision (fp32 master weights). bf16 also runs on CPU; "
        "fp16 (dynamic loss scaling: an overflowing step is a skipped step) needs CUDA.",
    )
    seed: int = 0
    poll_timeout_s: float = Field(default=1.0, gt=0)
    idle_exit_s: float | None = Field(
        default=None, gt=0, description="Exit when no sample arrives for this long (offline runs)."
    )

    @field_validator("topic", "metrics_topic", "policy_topic")
    @classmethod
    def _kafka_topic_name(cls, name: str | None) -> str | None:
        if name is not None and (not KAFKA_TOPIC.match(name) or name in (".", "..")):
            raise ValueError("not a Kafka topic name (1-249 of [A-Za-z0-9._-], not . or ..)")
        return name

    @field_validator("max_row_tokens")
    @classmethod
    def _row_holds_longest_sequence(cls, row: int, info: ValidationInfo) -> int:
        longest = info.data.get("max_sequence_tokens")
        if longest is not None and row < longest:
            raise ValueError(
                f"max_row_tokens={row} cannot hold the longest sequence the gateway may produce "
                f"(max_sequence_tokens={longest}, its max_context_tokens): raise max_row_tokens"
            )
        return row

    @field_validator("precision")
    @classmethod
    def _fp16_needs_cuda(cls, precision: str, info: ValidationInfo) -> str:
        if precision == "fp16" and not str(info.data.get("device", "cpu")).startswith("cuda"):
            raise ValueError("fp16 needs device=cuda (DeepSpeed has no fp16 on CPU): use bf16")
        return precision

    @model_validator(mode="after")
    def _flex_needs_cuda(self) -> TrainerSettings:
        if self.use_flex and not self.device.startswith("cuda"):
            raise ValueError("use_flex needs device=cuda: flex_attention has no CPU backward")
        return self
