"""Typed settings: defaults < YAML file < environment < CLI flags.

Each process declares a ``pydantic_settings.BaseSettings`` subclass of
``RigSettings`` with its own ``env_prefix`` (``MECHARM_DAEMON_``,
``MECHARM_RECORDER_``, ``MECHARM_RUNTIME_``) and loads it with
``load_settings``. Unknown keys in the YAML file and invalid values fail at
start-up with a ``ConfigError`` whose message names the key and the source.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

__all__ = ["ConfigError", "RigSettings", "load_settings", "read_yaml"]

_YAML_DATA: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "_yaml_data", default=None
)


class ConfigError(ValueError):
    """A configuration file, environment variable or flag holds an invalid value."""


class _YamlSource(PydanticBaseSettingsSource):
    """Values read from the YAML file given to ``load_settings``."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        data = _YAML_DATA.get() or {}
        return data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(_YAML_DATA.get() or {})


class RigSettings(BaseSettings):
    """Base of every process's settings; subclasses set ``env_prefix``."""

    model_config = SettingsConfigDict(
        extra="forbid", env_nested_delimiter="__", validate_default=True
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # init kwargs are the CLI flags: they win over env, which wins over YAML.
        return (init_settings, env_settings, _YamlSource(settings_cls))


S = TypeVar("S", bound=RigSettings)


def read_yaml(path: Path) -> dict[str, Any]:
    """Read a YAML mapping; raise ``ConfigError`` naming the file when it is not one."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"config file {path}: cannot read: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path}: not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {path}: top level must be a mapping, got {type(data).__name__}"
        )
    return data


def _describe(exc: ValidationError, source: str) -> str:
    parts = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "<root>"
        msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        parts.append(f"{key}: {msg} (got {err.get('input')!r})")
    return f"invalid configuration ({source}): " + "; ".join(parts)


def load_settings(
    model: type[S],
    config_file: Path | str | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> S:
    """Build ``model`` from defaults, ``config_file``, the environment and ``overrides``.

    ``overrides`` holds CLI flags; entries whose value is ``None`` (flag not given)
    are ignored. Raises ConfigError naming the offending key.
    """
    data = read_yaml(Path(config_file)) if config_file else {}
    cli = {k: v for k, v in (overrides or {}).items() if v is not None}
    source = f"file {config_file}, environment or flags" if config_file else "environment or flags"
    token = _YAML_DATA.set(data)
    try:
        return model(**cli)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source)) from None
    finally:
        _YAML_DATA.reset(token)
