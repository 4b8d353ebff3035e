"""Gateway settings (env prefix FORGE_GATEWAY_, config-file section `gateway`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from infra.settings import ForgeSettings
from schemas.pipeline_file import Domain, PipelineFile, read_pipeline_file
from schemas.topics import EVENTS, METRICS, POLICY, QUEUE

INSECURE_KEYS = {"", "changeme", "admin", "secret", "password"}


class GatewaySettings(ForgeSettings):
    model_config = SettingsConfigDict(env_prefix="FORGE_GATEWAY_", extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    public_url: str | None = Field(
        default=None, description="Base URL agents reach the gateway at; default http://host:port."
    )
    admin_key: SecretStr = Field(description="Bearer key for lifecycle/admin endpoints.")
    engine: Literal["embedded", "vllm"] = "embedded"
    model_dir: Path | None = Field(
        default=None, description="HF model + tokenizer dir; default FORGE_HOME/policies/base."
    )
    served_model_name: str = "forge-policy"
    renderer: str = Field(
        default="auto",
        description="The policy's format: auto (the family its tokenizer's special tokens and "
        "chat template show), a family name (qwen3, qwen3.5, glm-4.5, minimax-m2, deepseek-v3, "
        "kimi-k2, llama-3), or template (the tokenizer's own chat template, Hermes-style tool "
        "calls, no bridge).",
    )
    vllm_url: str = "http://127.0.0.1:8001"
    engines: int = Field(
        default=1,
        ge=1,
        le=16,
        description="Embedded engines in this process; several are routed as a fleet.",
    )
    vllm_urls: list[str] = Field(
        default_factory=list,
        description="vLLM servers of a fleet (with engine vllm); default: vllm_url alone.",
    )
    max_inflight_per_engine: int = Field(
        default=16,
        ge=1,
        description="Calls an engine of a fleet takes before a rollout's calls spill to the "
        "least-loaded engine (about its batch size).",
    )
    engine_backoff_s: float = Field(
        default=1.0,
        gt=0,
        description="A fleet engine that failed gets no calls this long, doubled per failure "
        "in a row (at most 30 s).",
    )
    max_batch_size: int = Field(default=16, ge=1, description="Rows per embedded micro-batch.")
    batch_wait_ms: float = Field(default=2.0, ge=0, description="Micro-batch gathering window.")
    max_context_tokens: int = Field(default=4096, ge=16)
    clamp_max_tokens: bool = Field(
        default=True,
        description="A request whose max_tokens exceeds the room its prompt leaves in the "
        "context is served with max_tokens lowered to fit (counted in /metrics and recorded "
        "in the call's event) instead of refused; a prompt that alone fills the context is "
        "refused either way.",
    )
    max_concurrent_generations: int = Field(
        default=64, ge=1, description="Model calls generating at once; more wait in a queue."
    )
    max_queued_generations: int = Field(
        default=256, ge=0, description="Model calls waiting beyond that; more get 429."
    )
    max_signals_per_rollout: int = Field(default=4096, ge=1)
    replicas: int = Field(
        default=1,
        ge=1,
        description="Gateways on this broker; with more than one each follows forge.events and "
        "has read every acknowledged event of a rollout before it serves the rollout.",
    )
    admission_staleness_steps: int | None = Field(
        default=None,
        ge=0,
        description="S: admit new groups only while fewer than (S+1)*P queued rollouts are not "
        "yet consumed by the trainer (429 + Retry-After beyond). None: no bound.",
    )
    admission_samples_per_step: int = Field(
        default=8, ge=1, description="P: the trainer's batch size (samples per step)."
    )
    max_active_rollouts: int | None = Field(
        default=None, ge=1, description="The active-buffer bound itself; default (S+1)*P."
    )
    default_max_tokens: int = Field(default=256, ge=1)
    rollout_timeout_s: float = Field(default=600.0, gt=0)
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    produce_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="How long a call's events may take to be acknowledged before it is "
        "answered 503. Outlasts a leader change on a cluster (a broker killed is fenced after "
        "broker.session.timeout.ms, 9 s by default, counted from a new controller's election).",
    )
    access_log: bool = Field(
        default=True,
        description="One line per request in the gateway's log (logger gateway.access): "
        "method, path, status, latency, call id; no keys, no bodies.",
    )
    keep_alive_s: int = Field(
        default=75,
        ge=1,
        description="How long an idle client connection stays open. Longer than any client "
        "keeps one for reuse (httpx and the OpenAI SDK: 5 s), so no client sends a request "
        "on a connection the gateway is closing at that moment (a reset, not a retry).",
    )
    events_topic: str = EVENTS.name
    queue_topic: str = QUEUE.name
    policy_topic: str = POLICY.name
    metrics_topic: str = Field(
        default=METRICS.name, description="TrainSteps: the trainer's queue head, for admission."
    )
    follow_policy: bool = Field(default=True, description="Load each PolicyUpdated as it arrives.")
    mix_tolerance: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="A new group of a domain this far over its target share is refused (429) "
        "while a domain under its share asks for room (gateway.call.domain_mix).",
    )
    mix_asking_s: float = Field(
        default=30.0,
        gt=0,
        description="A domain asked for room if a start of it came this recently.",
    )
    pipeline_file: Path | None = Field(
        default=None,
        description="The pipeline file (the streams worker's): the domains rollouts may name, "
        "their target shares, group sizes and truncation. Unset: the domain `default` alone.",
    )

    @field_validator("admin_key")
    @classmethod
    def _refuse_insecure(cls, value: SecretStr) -> SecretStr:
        secret = value.get_secret_value()
        if secret.lower() in INSECURE_KEYS or len(secret) < 16:
            raise ValueError("must be at least 16 characters and not a well-known default")
        return value

    @model_validator(mode="after")
    def _one_kind_of_fleet(self) -> GatewaySettings:
        if self.engine == "vllm" and self.engines != 1:
            raise ValueError("engines counts embedded engines; a vLLM fleet is vllm_urls")
        return self

    def domains(self) -> dict[str, Domain]:
        """The pipeline file's domains; a bad file is a one-line ``ConfigError``."""
        parsed = (
            PipelineFile() if self.pipeline_file is None else read_pipeline_file(self.pipeline_file)
        )
        return parsed.resolved_domains()

    @property
    def active_buffer(self) -> int | None:
        if self.max_active_rollouts is not None or self.admission_staleness_steps is None:
            return self.max_active_rollouts
        return (self.admission_staleness_steps + 1) * self.admission_samples_per_step

    @model_validator(mode="after")
    def _default_public_url(self) -> GatewaySettings:
        if self.public_url is None:
            self.public_url = f"http://{self.host}:{self.port}"
        return self
