"""Settings loading shared by every service: defaults < config file < environment."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from schemas.errors import ConfigError

S = TypeVar("S", bound="ForgeSettings")


class ForgeSettings(BaseSettings):
    """Base settings: environment variables override values given from a config file."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (env_settings, init_settings)


def read_config_section(config_file: Path | None, section: str) -> dict[str, Any]:
    """The ``section`` mapping of a YAML config file, or {} without a file."""
    if config_file is None:
        return {}
    try:
        document = yaml.safe_load(config_file.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"config file {config_file}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {config_file}: not valid YAML ({exc})") from exc
    if not isinstance(document, dict):
        raise ConfigError(f"config file {config_file}: top level must be a mapping")
    values = document.get(section, {})
    if not isinstance(values, dict):
        raise ConfigError(f"config file {config_file}: section '{section}' must be a mapping")
    return values


def load_settings(cls: type[S], config_file: Path | None = None, section: str = "") -> S:
    """Build settings, turning validation failures into one-line errors that name the input."""
    values = read_config_section(config_file, section) if section else {}
    try:
        return cls(**values)
    except ValidationError as exc:
        prefix = cls.model_config.get("env_prefix", "")
        problems = []
        for err in exc.errors():
            name = ".".join(str(p) for p in err["loc"])
            where = f"{prefix}{name}".upper() if name not in values else f"{section}.{name}"
            problems.append(f"{where}: {err['msg']} (got {err.get('input')!r})")
        raise ConfigError("; ".join(problems)) from None
