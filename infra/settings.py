"""Settings loading shared by every service: defaults < config file < environment."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin

import yaml
from pydantic import ValidationError
from pydantic_settings import BaseSettings, InitSettingsSource, PydanticBaseSettingsSource

from schemas.errors import ConfigError

S = TypeVar("S", bound="ForgeSettings")


class ForgeSettings(BaseSettings):
    """Base of every service's settings; build them with ``load_settings``."""


def _with_file_values(cls: type[S], values: dict[str, Any]) -> type[S]:
    """A subclass whose sources rank: explicit overrides > environment > file > defaults."""

    def sources(
        owner: type[BaseSettings],
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, InitSettingsSource(settings_cls, values))

    namespace = {"settings_customise_sources": classmethod(sources), "__module__": cls.__module__}
    return type(cls.__name__, (cls,), namespace)


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


def _is_path(annotation: Any) -> bool:
    """``Path`` or an optional ``Path`` (``Path | None``)."""
    if get_origin(annotation) in (Union, types.UnionType):
        return any(_is_path(arg) for arg in get_args(annotation))
    return annotation is Path


def _resolve_paths(cls: type[S], values: dict[str, Any], base: Path) -> dict[str, Any]:
    """Relative paths of a config file resolved against the file's directory, not the working
    directory: a config names files beside it, wherever the command is started from."""
    resolved = dict(values)
    for name, field in cls.model_fields.items():
        value = values.get(name)
        if isinstance(value, str) and _is_path(field.annotation):
            resolved[name] = base / Path(value).expanduser()  # an absolute path stays as it is
    return resolved


def load_settings(
    cls: type[S],
    config_file: Path | None = None,
    section: str = "",
    overrides: dict[str, Any] | None = None,
) -> S:
    """Build settings, turning validation failures into one-line errors that name the input.

    ``overrides`` (command-line flags; None values are ignored) win over the environment,
    which wins over the config file's ``section``, whose relative paths are relative to it.
    """
    values = read_config_section(config_file, section) if section else {}
    if config_file is not None:
        values = _resolve_paths(cls, values, config_file.parent.resolve())
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    try:
        return _with_file_values(cls, values)(**given)
    except ValidationError as exc:
        prefix = cls.model_config.get("env_prefix", "")
        problems = []
        for err in exc.errors():
            name = ".".join(str(p) for p in err["loc"])
            if name in given:
                where = f"--{name.replace('_', '-')}"
            elif name in values:
                where = f"{section}.{name}"
            else:
                where = f"{prefix}{name}".upper()
            problems.append(f"{where}: {err['msg']} (got {err.get('input')!r})")
        raise ConfigError("; ".join(problems)) from None
