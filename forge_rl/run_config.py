"""Settings of `forge-rl run` (env prefix FORGE_RUN_, config-file section `run`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from envs.registry import ENVIRONMENTS
from infra.settings import ForgeSettings
from schemas.pipeline_file import DEFAULT_DOMAIN


class RunSettings(ForgeSettings):
    model_config = SettingsConfigDict(env_prefix="FORGE_RUN_", extra="forbid")

    task: str = Field(default="guess", description="The environment played (envs/registry.py).")
    domains: dict[str, str] = Field(
        default_factory=dict,
        description="Domain name -> environment played for it, one run over several domains; "
        "the pipeline file names the same domains (their shares, rewards, group sizes). Empty: "
        "`task` alone, as the domain `default`.",
    )
    agents: int = Field(default=8, ge=1, description="Agent processes running at once.")
    group_size: int = Field(default=4, ge=1, description="Rollouts per task (the reward group).")
    max_turns: int = Field(default=4, ge=1, le=32, description="Tool calls per episode.")
    tool_latency_s: float = Field(
        default=0.0,
        ge=0,
        le=60,
        description="Seconds each tool call takes, as a sandbox's would: lengthens the "
        "episodes of tool-using tasks without more model calls.",
    )
    duration_s: float = Field(default=480.0, gt=0, description="Stop launching after this long.")
    max_rollouts: int | None = Field(default=None, ge=1, description="Stop after this many.")
    until_policy: int | None = Field(
        default=None,
        ge=1,
        description="Stop once an episode begun after the engine served this version has ended.",
    )
    engine: Literal["embedded", "vllm"] = Field(
        default="embedded",
        description="The gateway's engine: embedded, or a vLLM CPU server this run starts on "
        "the base policy (its environment built by scripts/setup_vllm.sh).",
    )
    engines: int | None = Field(
        default=None,
        ge=1,
        le=16,
        description="Embedded engines in the gateway process (default: the gateway's setting).",
    )
    agent_cmd: str | None = Field(
        default=None,
        description="Shell command of a black-box agent for every domain; default: each "
        "domain's built-in one.",
    )
    agent_cmds: dict[str, str] = Field(
        default_factory=dict,
        description="Domain -> shell command of a black-box agent for that domain alone (wins "
        "over agent_cmd); the other domains keep theirs.",
    )
    agent_timeout_s: float = Field(default=120.0, gt=0, description="Kill an episode after this.")
    seed: int = 0
    gateway_port: int = Field(default=0, ge=0, le=65535, description="0 picks a free port.")
    streams_web_port: int = Field(default=0, ge=0, le=65535, description="0 picks a free port.")
    startup_timeout_s: float = Field(default=300.0, gt=0)
    drain_timeout_s: float = Field(
        default=60.0, gt=0, description="Wait this long for the sink to catch up before reporting."
    )
    progress_interval_s: float = Field(
        default=10.0, gt=0, description="Seconds between progress lines when not on a terminal."
    )

    @field_validator("task")
    @classmethod
    def _known_task(cls, name: str) -> str:
        if name not in ENVIRONMENTS:
            raise ValueError(f"no environment {name!r} (known: {', '.join(sorted(ENVIRONMENTS))})")
        return name

    @field_validator("domains")
    @classmethod
    def _known_environments(cls, domains: dict[str, str]) -> dict[str, str]:
        for name in domains.values():
            cls._known_task(name)
        return domains

    @property
    def played(self) -> dict[str, str]:
        """Domain -> environment of every domain this run plays."""
        return self.domains or {DEFAULT_DOMAIN: self.task}

    @model_validator(mode="after")
    def _agents_for_played_domains(self) -> RunSettings:
        unknown = sorted(set(self.agent_cmds) - set(self.played))
        if unknown:
            raise ValueError(f"agent_cmds names {', '.join(map(repr, unknown))}, not a domain "
                             f"this run plays ({', '.join(sorted(self.played))})")  # fmt: skip
        return self

    def agent_command(self, domain: str) -> str | None:
        """The black-box agent's command for ``domain``; None: its built-in agent."""
        return self.agent_cmds.get(domain, self.agent_cmd)

    @model_validator(mode="after")
    def _a_group_fits(self) -> RunSettings:
        if self.agents < self.group_size:
            raise ValueError(f"agents ({self.agents}) must be at least group_size "
                             f"({self.group_size}): a group's rollouts run together")  # fmt: skip
        return self

    @model_validator(mode="after")
    def _one_vllm_server(self) -> RunSettings:
        if self.engine == "vllm" and self.engines not in (None, 1):
            raise ValueError("engines counts the gateway's embedded engines; engine vllm starts "
                             "one vLLM server")  # fmt: skip
        return self
