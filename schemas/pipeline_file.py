"""The pipeline file: reward weights, tool-outcome rules, truncation, window, timeouts, and the
domains one run trains at once (pure).

The gateway and the streams worker read the same file: the gateway for the domains it admits
(names, target shares, group sizes, truncation), the worker for how it scores them. Every
setting at the top level is the default of every domain; a domain overrides what it names.
Without a ``domains`` section the run has one domain, ``default``, with all of the mix.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from schemas.errors import ConfigError

DEFAULT_DOMAIN = "default"
DOMAIN_PATTERN = r"^[a-z][a-z0-9_-]{0,63}$"
"""A domain's name: a lower-case label, as it appears in analytics and on the progress line."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class _Values(BaseModel):
    """Reward values: a NaN or infinite one turns every reward into NaN without an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="after")
    def _finite(self) -> _Values:
        for name, value in self.model_dump().items():
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number (got {value})")
        return self


class RewardConfig(_Values):
    process_weight: float = 1.0
    outcome_weight: float = 1.0
    speed_weight: float = 0.1
    speed_clip: float = Field(default=1.0, gt=0)
    aborted_outcome: float = 0.0
    truncated_outcome: float = Field(
        default=-0.2,
        description="The outcome of a rollout ended early as hopeless (when it gave none): a "
        "small penalty, so it is trained on rather than dropped.",
    )


class ToolRewards(_Values):
    """Process signals derived from the tool calls the gateway recorded (``schemas.tool_outcomes``),
    each at the step of the call it concerns."""

    malformed_call: float = -0.1
    unknown_tool: float = -0.1
    error_result: float = -0.05
    used_result: float = 0.05
    error_pattern: str = Field(
        default=r"(?i)\b(error|exception|traceback|failed|invalid)\b",
        description="A tool result whose text matches reports an error.",
    )
    used_min_chars: int = Field(
        default=4,
        ge=1,
        description="A result is used when a later completion repeats one of its words this long.",
    )

    @field_validator("error_pattern")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from exc
        return pattern


class Truncation(_Strict):
    """When the gateway ends a rollout early as truncated (``gateway.call.truncation``)."""

    enabled: bool = False
    negative_steps: int = Field(
        default=3, ge=1, description="This many steps in a row with a negative net signal."
    )


class AdaptiveWindowSettings(_Strict):
    """The window set from observed completion times and the trainer's pace, up to ``window``
    (so the staleness bound S + ceil((window-1)/P) still holds):
    streams/sequencing/adaptive_window.py."""

    samples_per_step: int = Field(ge=1, description="P: samples the trainer takes a step.")
    quantile: float = Field(
        default=0.9, gt=0.5, lt=1, description="How slow a head the window covers."
    )


class DomainEntry(_Strict):
    share: float | None = Field(default=None, gt=0, le=1)
    group_size: int | None = Field(default=None, ge=1, le=1024)
    group_timeout_s: float | None = Field(default=None, gt=0)
    rewards: RewardConfig | None = None
    tool_rewards: ToolRewards | None = None
    truncation: Truncation | None = None


@dataclass(frozen=True)
class Domain:
    """One domain with the top-level defaults filled in."""

    name: str
    share: float
    group_size: int | None
    group_timeout_s: float
    rewards: RewardConfig
    tool_rewards: ToolRewards
    truncation: Truncation


class PipelineFile(_Strict):
    rewards: RewardConfig = Field(default_factory=RewardConfig)
    tool_rewards: ToolRewards = Field(default_factory=ToolRewards)
    truncation: Truncation = Field(default_factory=Truncation)
    window: int | None = Field(default=64, ge=1)
    adaptive_window: AdaptiveWindowSettings | None = Field(
        default=None, description="Off by default: `window` is then fixed."
    )
    item_timeout_s: float | None = Field(default=900.0, gt=0)
    group_timeout_s: float = Field(default=900.0, gt=0)
    max_staleness: int | None = Field(default=None, ge=0)
    drop_uniform_groups: bool = Field(
        default=False,
        description="Groups whose members all got the same reward carry no learning signal: "
        "leave them out of forge.train (counted per domain).",
    )
    domains: dict[str, DomainEntry] = Field(default_factory=dict)

    @field_validator("domains")
    @classmethod
    def _named_and_shared(cls, domains: dict[str, DomainEntry]) -> dict[str, DomainEntry]:
        for name in domains:
            if not re.fullmatch(DOMAIN_PATTERN, name):
                raise ValueError(f"domain name {name!r} must match {DOMAIN_PATTERN}")
        shares = [d.share for d in domains.values()]
        given = [s for s in shares if s is not None]
        if given and len(given) != len(shares):
            raise ValueError("give every domain a share, or none (equal shares)")
        if given and not math.isclose(sum(given), 1.0, abs_tol=1e-6):
            raise ValueError(f"domain shares must add up to 1 (they add up to {sum(given):g})")
        return domains

    @model_validator(mode="after")
    def _adaptive_needs_a_cap(self) -> PipelineFile:
        if self.adaptive_window is not None and self.window is None:
            raise ValueError(
                "adaptive_window needs a window to stay within (window: null is greedy)"
            )
        return self

    @model_validator(mode="after")
    def _items_outlast_groups(self) -> PipelineFile:
        """A queue slot timing out before its group does would drop every member of a group
        still waiting for a straggler, the group timeout never getting its chance."""
        if self.item_timeout_s is None:
            return self
        for domain in self.resolved_domains().values():
            if self.item_timeout_s < domain.group_timeout_s:
                whose = "" if domain.name == DEFAULT_DOMAIN else f" of domain {domain.name}"
                raise ValueError(
                    f"item_timeout_s ({self.item_timeout_s:g}) must be at least group_timeout_s "
                    f"({domain.group_timeout_s:g}){whose}"
                )
        return self

    def resolved_domains(self) -> dict[str, Domain]:
        """Every domain with the defaults filled in; ``default`` alone without a section."""
        entries = self.domains or {DEFAULT_DOMAIN: DomainEntry(share=1.0)}
        equal = 1.0 / len(entries)
        return {
            name: Domain(
                name=name,
                share=equal if entry.share is None else entry.share,
                group_size=entry.group_size,
                group_timeout_s=entry.group_timeout_s or self.group_timeout_s,
                rewards=entry.rewards or self.rewards,
                tool_rewards=entry.tool_rewards or self.tool_rewards,
                truncation=entry.truncation or self.truncation,
            )
            for name, entry in entries.items()
        }


def read_pipeline_file(path: Path) -> PipelineFile:
    """The file's settings; any problem with it is a one-line ``ConfigError`` naming it."""
    try:
        return PipelineFile.model_validate(yaml.safe_load(path.read_text()) or {})
    except OSError as exc:
        raise ConfigError(f"pipeline file {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"pipeline file {path}: not valid YAML ({' '.join(str(exc).split())})"
        ) from exc
    except ValidationError as exc:
        problems = "; ".join(_problem(err["loc"], err["msg"]) for err in exc.errors())
        raise ConfigError(f"pipeline file {path}: {problems}") from None


def _problem(loc: tuple[int | str, ...], msg: str) -> str:
    message = msg.removeprefix("Value error, ")
    return f"{'.'.join(map(str, loc))}: {message}" if loc else message
