"""Typed settings: defaults < YAML file < environment < CLI flags.

Each process declares a ``pydantic_settings.BaseSettings`` subclass of
``RigSettings`` with its own ``env_prefix`` (``MECHARM_DAEMON_``,
``MECHARM_RECORDER_``, ``MECHARM_RUNTIME_``) and loads it with
``load_settings``. Unknown keys in the YAML file and invalid values fail at
start-up with a ``ConfigError`` whose message names the key and the source; so
does every other mistake in the file (missing, a directory, unreadable, not UTF-8,
not YAML, a key given twice, not a mapping, nested too deeply): every process
prints the message and exits 2, never with a traceback (docs/architecture.md,
"Configuration").
"""

from __future__ import annotations

import contextvars
import difflib
import errno
import os
import re
import stat
import types
import typing
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

__all__ = [
    "MAX_CONFIG_BYTES",
    "ConfigError",
    "RigSettings",
    "cannot_listen",
    "closest",
    "describe_errors",
    "did_you_mean",
    "load_settings",
    "read_yaml",
]

#: A settings file is a few KB; anything this large is the wrong file.
MAX_CONFIG_BYTES = 1 << 20
_MAX_DEPTH = 20
_MAX_VALUES = 100_000

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
    #: settings this process no longer has, each with what happens now: a file or variable
    #: that still sets one is refused with that sentence instead of "unknown key"
    removed_settings: ClassVar[Mapping[str, str]] = {}
    #: settings that moved into a group (flat name: dotted path): a file or variable that
    #: still sets one by its old name is refused with its new place
    moved_settings: ClassVar[Mapping[str, str]] = {}

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


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (YAML keeps the last
    silently, so an edited copy of a key would win without anyone noticing)."""


def _mapping_no_duplicates(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<: *base``: flattened below
            continue
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        try:
            first = seen.get(key)
            seen[key] = line
        except TypeError:  # an unhashable key: construct_mapping names it
            continue
        if first is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} given twice (lines {first} and {line}): keep one",
                key_node.start_mark,
            )  # fmt: skip
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _mapping_no_duplicates,  # type: ignore[arg-type]
)


def _too_big(node: yaml.Node) -> str | None:
    """Why a composed YAML document is no settings file: nested too deeply, or more values
    than any settings file has once aliases are expanded (``&a [*b, *b, ...]`` chains grow
    exponentially). Iterative with early exits, so a hostile file costs little."""
    stack, count = [(node, 1)], 0
    while stack:
        n, d = stack.pop()
        count += 1
        if d > _MAX_DEPTH:
            return f"nested more than {_MAX_DEPTH} levels deep"
        if count > _MAX_VALUES:
            return f"more than {_MAX_VALUES} values (aliases expanding?)"
        if isinstance(n, yaml.MappingNode):
            stack.extend((v, d + 1) for pair in n.value for v in pair)
        elif isinstance(n, yaml.SequenceNode):
            stack.extend((v, d + 1) for v in n.value)
    return None


def read_yaml(path: Path) -> dict[str, Any]:
    """Read a YAML mapping; raise ``ConfigError`` naming the file, what is wrong with it
    and what to do, for every way a file can be wrong (never another exception)."""
    path = Path(path)
    fix = "fix it or pass another file with --config"
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ConfigError(f"config file {path}: does not exist; {fix}") from None
    except OSError as exc:
        raise ConfigError(f"config file {path}: cannot read: {exc.strerror or exc}") from None
    if str(path) == os.devnull:
        return {}  # `--config /dev/null`: the usual way to say "no file, defaults only"
    if not stat.S_ISREG(st.st_mode):
        what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise ConfigError(f"config file {path}: is {what}, not a YAML file; {fix}")
    if st.st_size > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"config file {path}: {st.st_size} bytes, more than a settings file has "
            f"({MAX_CONFIG_BYTES} max): is it the right file? {fix}"
        )
    try:
        raw = path.read_bytes()[: MAX_CONFIG_BYTES + 1]
    except OSError as exc:
        raise ConfigError(
            f"config file {path}: cannot read: {exc.strerror or exc}; check its permissions"
        ) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"config file {path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
            f"{exc.start}, line {line}); save it as UTF-8 (e.g. `iconv -f latin1 -t utf-8`), "
            "or pass another file with --config"
        ) from None
    try:
        node = yaml.compose(text, Loader=_StrictLoader)
        why = _too_big(node) if node is not None else None
        if why is not None:
            raise ConfigError(f"config file {path}: {why}, which no settings file is; {fix}")
        data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader: no Python tags
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"config file {path}: not valid YAML{at}: {problem}; {fix}") from None
    except RecursionError:
        raise ConfigError(f"config file {path}: nested too deeply to read; {fix}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {path}: top level must be a mapping of setting: value, got "
            f"{type(data).__name__}; {fix}"
        )
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise ConfigError(f"config file {path}: keys must be setting names, got {bad[0]!r}; {fix}")
    return data


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name closest to a mistyped ``name`` (``difflib``), None when none is close."""
    close = difflib.get_close_matches(name, sorted(set(known)), n=1, cutoff=0.6)
    return close[0] if close else None


def did_you_mean(name: str, known: Iterable[str], what: str = "") -> str:
    """``; did you mean 'x'?`` for the known name closest to a mistyped ``name``, else the
    known names (``what``: how to call them; empty: nothing) (docs/setup.md, "Traps")."""
    names = list(known)
    match = closest(name, names)
    if match is not None:
        return f"; did you mean {match!r}?"
    return f"; {what}: {', '.join(names)}" if what and names else ""


def cannot_listen(what: str, host: str, port: int, flag: str, exc: OSError) -> str:
    """The one line a process prints when it cannot listen on its ``port``: which port, and
    the flag that moves it (a port already in use is the usual cause; docs/setup.md)."""
    if exc.errno == errno.EADDRINUSE:
        return (
            f"{what} {host}:{port} is already in use (another instance still running?): stop "
            f"it or pass {flag} with a free port"
        )
    return f"cannot listen on {what} {host}:{port}: {exc.strerror or exc} (change it with {flag})"


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside a field's annotation (``M``, ``M | None``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _model_of(arg)
            if found is not None:
                return found
    return None


def _known_keys(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> Collection[str]:
    """The keys ``model`` accepts at ``loc`` (the path of the parent of an unknown key)."""
    for part in loc:
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            return ()
        model = _model_of(model.model_fields[part].annotation)
    return tuple(model.model_fields) if model is not None else ()


def _removed(model: type[BaseModel] | None, name: str) -> str | None:
    """Why ``name`` is refused when ``model`` no longer has it (None: it never had it)."""
    removed = getattr(model, "removed_settings", None) or {}
    why = removed.get(name)
    return f"removed setting: {why}; delete it" if why is not None else None


def _message(err: Any, model: type[BaseModel] | None) -> str:
    if err["type"] != "extra_forbidden":
        return str(err["msg"])
    loc = tuple(err["loc"])
    name = str(loc[-1]) if loc else ""
    if len(loc) == 1 and (gone := _removed(model, name)) is not None:
        return gone
    return "unknown key" + did_you_mean(name, _known_keys(model, loc[:-1]))


def describe_errors(exc: ValidationError, model: type[BaseModel] | None = None) -> str:
    """Every error of a pydantic validation as ``field.path: message``, joined by ``; ``:
    the one-line reason a file or request was refused (sim profiles, scenes, faults).
    ``model``: the validated model, so an unknown key gets a "did you mean"."""
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {_message(e, model)}"
        for e in exc.errors()
    )


def _describe(exc: ValidationError, source: str, model: type[BaseModel] | None = None) -> str:
    parts = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "<root>"
        msg = _message(err, model)
        got = repr(err.get("input"))
        parts.append(f"{key}: {msg} (got {got if len(got) <= 80 else got[:77] + '...'})")
    return (
        f"invalid configuration ({source}): "
        + "; ".join(parts)
        + " (fix or remove it where it is set)"
    )


def _check_environment(model: type[RigSettings], environ: Mapping[str, str] | None = None) -> None:
    """Refuse a variable with the model's prefix that names no setting: pydantic-settings
    ignores it, so a mistyped ``MECHARM_RUNTIME_TIME_SCAL`` would change nothing, silently
    (docs/setup.md, "Traps"). Nested keys (``PREFIX_SIM__X``) are checked by the model."""
    prefix = str(model.model_config.get("env_prefix") or "")
    if not prefix:
        return
    fields = {name.lower() for name in model.model_fields}
    for var in sorted(os.environ if environ is None else environ):
        if not var.upper().startswith(prefix.upper()):
            continue
        key = var[len(prefix) :].split("__", 1)[0].lower()
        flat = "__" not in var[len(prefix) :]
        if key in fields and not (flat and key in model.moved_settings):
            continue
        if (gone := _removed(model, key)) is not None:
            raise ConfigError(f"environment variable {var}: {gone} (unset it)")
        if (new := model.moved_settings.get(key)) is not None:
            raise ConfigError(
                f"environment variable {var}: this setting moved to {new}: rename it "
                f"{prefix}{new.replace('.', '__').upper()}"
            )
        match = closest(key, fields)
        hint = f"; did you mean {prefix}{match.upper()}?" if match else ""
        raise ConfigError(
            f"environment variable {var}: {key!r} is no setting of this process{hint} "
            "(unset it or fix its name)"
        )


def _check_moved(
    model: type[RigSettings], data: Mapping[str, Any], path: Path | str | None
) -> None:
    """Refuse a file that still sets a setting by its name from before the groups, with
    where each such setting lives now (docs/settings.md): one spelling in files."""
    moved = [(k, model.moved_settings[k]) for k in data if k in model.moved_settings]
    if isinstance(data.get("judge"), dict):  # ``judge:`` is a group now, and a mapping is one
        moved = [(k, new) for k, new in moved if k != "judge"]
    if moved:
        where = "; ".join(f"{k} is now {new}" for k, new in moved)
        raise ConfigError(
            f"config file {path}: settings are grouped now (docs/settings.md): {where}; "
            "move each under its group, e.g. `arm:` then `  speed: 20`"
        )


def load_settings(
    model: type[S],
    config_file: Path | str | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> S:
    """Build ``model`` from defaults, ``config_file``, the environment and ``overrides``.

    ``overrides`` holds CLI flags, a group's keys as dotted paths (``arm.speed``); entries
    whose value is ``None`` (flag not given) are ignored. Raises ConfigError naming the offending key.
    """
    data = read_yaml(Path(config_file)) if config_file else {}
    cli: dict[str, Any] = {}
    for k, v in (overrides or {}).items():
        if v is None:
            continue
        *groups, leaf = k.split(".")  # "arm.speed": a key of a settings group
        node = cli
        for g in groups:
            node = node.setdefault(g, {})
        node[leaf] = v
    source = f"file {config_file}, environment or flags" if config_file else "environment or flags"
    _check_environment(model)
    _check_moved(model, data, config_file)
    token = _YAML_DATA.set(data)
    try:
        return model(**cli)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source, model)) from None
    except SettingsError as exc:  # an environment value that is not valid JSON for its key
        prefix = str(model.model_config.get("env_prefix", ""))
        field = re.search(r'field "(\w+)"', str(exc))
        named = (
            sorted(v for v in os.environ if v.upper().startswith((prefix + field.group(1)).upper()))
            if field
            else []
        )
        which = f" ({', '.join(named)})" if named else ""
        raise ConfigError(
            f"invalid configuration ({source}): {exc}{which}; list and tuple values in {prefix}* "
            'variables are JSON, e.g. "[0, 0, 0, 0, 0, -30]"'
        ) from None
    finally:
        _YAML_DATA.reset(token)
