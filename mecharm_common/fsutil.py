"""Safe file I/O: atomic writes, names from the network, and the data-root mount guard."""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import uuid
from pathlib import Path
from typing import Any

__all__ = [
    "NAME_MAX",
    "UnsafeNameError",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "check_data_root",
    "safe_join",
    "validate_name",
]

NAME_MAX = 128
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class UnsafeNameError(ValueError):
    """A name that came from outside (network, file) cannot be used as a path component."""


def validate_name(name: object, what: str = "name") -> str:
    """Return ``name`` if it is a safe single path component, else raise UnsafeNameError.

    Safe: a str of 1..NAME_MAX characters from [A-Za-z0-9._-], starting with a letter
    or digit, not containing "..". Rejects separators, NUL, absolute paths, empty.
    """
    if not isinstance(name, str):
        raise UnsafeNameError(f"{what} must be a string, got {type(name).__name__}")
    if not name:
        raise UnsafeNameError(f"{what} is empty")
    if len(name) > NAME_MAX:
        raise UnsafeNameError(f"{what} is {len(name)} characters long (max {NAME_MAX})")
    if ".." in name or not _NAME_RE.fullmatch(name):
        raise UnsafeNameError(f"{what} {name[:60]!r} has characters outside [A-Za-z0-9._-] or '..'")
    return name


def safe_join(root: Path, *names: str) -> Path:
    """Join validated names under ``root``; the result is guaranteed to stay inside root."""
    root_r = Path(root).resolve()
    path = root_r.joinpath(*(validate_name(n, "path component") for n in names)).resolve()
    if path != root_r and root_r not in path.parents:
        raise UnsafeNameError(f"path {path} escapes the data root {root_r}")
    return path


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file in the same folder, fsync, rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def check_data_root(root: Path, require_mount: bool = False) -> str | None:
    """Mount guard (docs/runtime.md, "The data root and the mount guard"). Return None when ``root`` is usable, else the reason.

    Usable means: it exists and is a directory, it is a mount point when
    ``require_mount`` is set, and a probe file can be written and removed.
    Never creates ``root`` itself: a missing SSD must not turn into a local folder.
    """
    root = Path(root)
    if not root.is_dir():
        return f"data root {root} does not exist or is not a directory"
    if require_mount and not os.path.ismount(root):
        return f"data root {root} is not a mount point"
    probe = root / f".mount_probe_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    try:
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as exc:
        return f"data root {root} is not writable: {exc.strerror or exc}"
    return None
