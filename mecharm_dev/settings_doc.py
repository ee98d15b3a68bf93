"""Write docs/settings.md, the reference of every setting, from the pydantic models.

Each process's settings model is the one home of its keys: the type, the default and
the bounds come from the model, the words from the field's ``description`` or the
comment lines just above it in the source (``#:`` or ``#``), and the sections from the
``# ---- title`` comments. A test (tests/test_repo.py) fails when the page and the models
disagree, so the reference cannot go stale:

    python -m mecharm_dev.settings_doc            # rewrite docs/settings.md
    python -m mecharm_dev.settings_doc --check    # exit 1 when it is not current
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import pkgutil
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

__all__ = ["MODELS", "main", "reading_modules", "render", "settings_read_in"]

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "settings.md"

#: (title, import path of the model, its config file, its command)
MODELS: tuple[tuple[str, str, str, str], ...] = (
    ("Arm daemon", "mecharm.daemon.config:DaemonSettings", "configs/daemon.yaml", "mecharm-daemon"),
    (
        "Recorder",
        "mecharm.recorder.config:RecorderSettings",
        "configs/recorder.yaml",
        "mecharm-recorder",
    ),
    (
        "Runtime",
        "mecharm.runtime.config:RuntimeSettings",
        "configs/runtime.yaml",
        "mecharm-runtime",
    ),
    ("Pose lookups", "mecharm.runtime.lookup.settings:FkToolSettings", "-", "mecharm fk"),
    (
        "Export",
        "mecharm.tools.export.config:ExportSettings",
        "configs/export.yaml",
        "mecharm export",
    ),
    (
        "Replay",
        "mecharm.tools.replay.config:ReplaySettings",
        "configs/replay.yaml",
        "mecharm replay",
    ),
)

#: the safe arm, which every task's motion goes through: like each task's stage modules, it
#: declares the runtime settings it reads (``SETTINGS_READ``)
SAFE_ARM_MODULE = "mecharm.runtime.safe_arm"


def settings_read_in(source: str, fields: frozenset[str] | set[str]) -> set[str]:
    """The settings (dotted paths among ``fields``: ``arm.speed``, ``task``) a module's
    ``source`` reads as ``s.X``, ``settings.X`` or ``<anything>.settings.X``, a group's
    key as ``s.group.key`` (the stages' ``s = ctx.settings`` and ``ctx.settings.X``)."""

    def is_settings(node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in ("s", "settings")
        return isinstance(node, ast.Attribute) and node.attr == "settings"

    found = set()
    for n in ast.walk(ast.parse(source)):
        if not isinstance(n, ast.Attribute):
            continue
        if is_settings(n.value) and n.attr in fields:
            found.add(n.attr)
        inner = n.value
        if isinstance(inner, ast.Attribute) and is_settings(inner.value):
            path = f"{inner.attr}.{n.attr}"
            if path in fields:
                found.add(path)
    return found


def reading_modules() -> list[tuple[str, frozenset[str]]]:
    """(module, the settings it declares it reads): the safe arm, then every module of
    every registered task's package (``mecharm.runtime.<task>``) that declares them."""
    from mecharm.runtime.tasks import TASKS

    names = [SAFE_ARM_MODULE]
    for task in TASKS:
        pkg = importlib.import_module(f"mecharm.runtime.{task}")
        names += [pkg.__name__]  # its __init__, then its modules
        names += sorted(f"{pkg.__name__}.{m.name}" for m in pkgutil.iter_modules(pkg.__path__))
    out = []
    for name in names:
        declared = getattr(importlib.import_module(name), "SETTINGS_READ", None)
        if declared is not None:
            out.append((name, frozenset(declared)))
    return out


_SECTION = re.compile(r"^\s*# -{3,}\s*(.*)$")
_FIELD = re.compile(r"^\s{4}([a-z_][a-z0-9_]*)\s*:")


def _load(path: str) -> type[BaseModel]:
    module, name = path.split(":")
    cls = getattr(__import__(module, fromlist=[name]), name)
    assert isinstance(cls, type) and issubclass(cls, BaseModel)
    return cls


def _comments(cls: type[BaseModel]) -> tuple[dict[str, str], dict[str, str]]:
    """(field -> the comment above it or beside it, field -> its section title)."""
    words: dict[str, str] = {}
    sections: dict[str, str] = {}
    block: list[str] = []
    section = ""
    for line in inspect.getsource(cls).splitlines():
        stripped = line.strip()
        m = _SECTION.match(line)
        if m:
            section, block = m.group(1).strip(), []
            continue
        if stripped.startswith("#"):
            block.append(stripped.lstrip("#:").strip())
            continue
        f = _FIELD.match(line)
        if f and f.group(1) in cls.model_fields:
            name = f.group(1)
            inline = line.split("  # ", 1)[1].strip() if "  # " in line else ""
            words[name] = " ".join([*block, inline]).strip()
            sections[name] = section
        if stripped or f:
            block = []
    return words, sections


def _type(t: Any) -> str:
    origin = typing.get_origin(t)
    if origin is typing.Literal:
        return " \\| ".join(repr(a).replace("'", '"') for a in typing.get_args(t))
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(_type(a) for a in typing.get_args(t))
    if origin is typing.Annotated:
        return _type(typing.get_args(t)[0])
    if origin is not None:
        args = ", ".join(_type(a) for a in typing.get_args(t))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if t is type(None):
        return "null"
    return getattr(t, "__name__", str(t))


def _default(f: FieldInfo) -> str:
    if f.default_factory is not None:
        name = getattr(f.default_factory, "__name__", "")
        return "computed" if name == "<lambda>" else f"computed (`{name}()`)"
    d = f.default
    if d is None:
        return "null"
    if isinstance(d, BaseModel):
        return "(the group below)"
    if isinstance(d, Path):
        return f"`{d.name}` (shipped)" if d.is_absolute() else f"`{d}`"
    return f"`{_yaml(d)}`"


def _yaml(v: Any) -> str:
    """A default as it is written in the YAML file."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, tuple | list):
        return "[" + ", ".join(_yaml(x) for x in v) + "]"
    if isinstance(v, str):
        return f'"{v}"'
    return repr(v)


def _bounds(f: FieldInfo) -> str:
    marks = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<", "min_length": "length ≥"}
    out = []
    for m in f.metadata:
        for attr, sym in marks.items():
            v = getattr(m, attr, None)
            if v is not None:
                out.append(f"{sym} {v}")
    return ", ".join(out)


def _rows(cls: type[BaseModel], prefix: str, env: str, out: list[str], section: str) -> str:
    words, sections = _comments(cls)
    for name, f in cls.model_fields.items():
        ann = f.annotation
        if sections.get(name) and sections[name] != section:
            section = sections[name]
            out.append(f"| **{section}** | | | | |")
        key = f"{prefix}{name}"
        what = (f.description or words.get(name, "")).replace("|", "\\|")
        nested = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
        if nested is not None:
            doc = (inspect.getdoc(nested) or "").split("\n\n")[0].replace("\n", " ")
            out.append(f"| `{key}` | group | | | {what or doc} |")
            section = _rows(nested, f"{key}.", f"{env}{name.upper()}__", out, section)
            continue
        env_name = f"`{env}{name.upper()}`"
        out.append(
            f"| `{key}` | {_type(ann)} | {_default(f)} | {_bounds(f)} | {what} ({env_name}) |"
        )
    return section


def render() -> str:
    lines = [
        "# Settings reference",
        "",
        "<!-- generated by `python -m mecharm_dev.settings_doc` from the settings models; "
        "do not edit by hand -->",
        "",
        "Every process reads its settings from a YAML file (`--config FILE`), then the",
        "environment (each key as shown, nested groups with `__`), then its flags; an unknown",
        "key or a bad value stops the start with a message naming it (exit 2). The README",
        "shows the flags of each command; this page lists every key, generated from the",
        "models themselves (mecharm_dev/settings_doc.py), so it is never out of date.",
        "",
    ]
    for title, path, config, command in MODELS:
        cls = _load(path)
        env = str(cls.model_config.get("env_prefix") or "")
        doc = (inspect.getdoc(cls) or "").split("\n\n")[0].replace("\n", " ")
        lines += [f"## {title} (`{command}`)", "", doc, ""]
        if config != "-":
            lines += [f"Shipped file: `{config}`; environment prefix `{env}`.", ""]
        else:
            lines += [f"Environment prefix `{env}`.", ""]
        lines += ["| key | type | default | bounds | what (environment) |", "|---|---|---|---|---|"]
        rows: list[str] = []
        _rows(cls, "", env, rows, "")
        lines += [*rows, ""]
        if title == "Runtime":
            lines += [
                "### What each stage reads",
                "",
                "The safe arm and each task's stage modules declare the settings they read",
                "(`SETTINGS_READ`; tests/runtime/test_settings_read.py checks each against the",
                "module's code), so a change to a setting shows which stages it reaches. The",
                "set-up (`mecharm/runtime/rigsetup.py`, `service.py`, `trial.py`, `cli.py`)",
                "reads the rest: where things are, the links, the cameras and the judge.",
                "",
                "| module | settings |",
                "|---|---|",
                *(
                    f"| `{m}` | {', '.join(f'`{k}`' for k in sorted(keys))} |"
                    for m, keys in reading_modules()
                ),
                "",
            ]
        moved = getattr(cls, "moved_settings", None) or {}
        if moved:
            lines += [
                "Keys of the flat layout from before the groups, and where each lives now. A",
                "file or variable that still sets one by its old name is refused with its new",
                "place; a trace's constants and a run log's are read into their groups.",
                "",
                "| old key | now |",
                "|---|---|",
                *(f"| `{k}` | `{new}` |" for k, new in sorted(moved.items())),
                "",
            ]
        removed = getattr(cls, "removed_settings", None) or {}
        if removed:
            lines += [
                "Removed keys (a file or variable that still sets one is refused with this "
                'sentence; docs/replay.md, "Traces older than the code"):',
                "",
                "| key | what happens now |",
                "|---|---|",
                *(f"| `{k}` | {why} |" for k, why in sorted(removed.items())),
                "",
            ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mecharm_dev.settings_doc", description=__doc__)
    ap.add_argument("--check", action="store_true", help="exit 1 when the page is not current")
    a = ap.parse_args(argv)
    text = render()
    if a.check:
        current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
        if current != text:
            print(f"{PAGE} is not current: python -m mecharm_dev.settings_doc", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
