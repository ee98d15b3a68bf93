"""Is Rerun here, where is its viewer, is a viewer URL well formed: asked without importing rerun.

Shared ground: ``mecharm view`` (mecharm.tools) and the runtime's Rerun jobs
(mecharm/runtime/viewjobs.py, ``display_url`` in its settings) ask the same questions.

The runtime asks these before its first trial (an install without the tools extra,
a venv whose ``bin`` is not on PATH, a mistyped ``--display-url``) so it can say so
once instead of failing after every trial; ``mecharm view`` asks them before it
imports rerun, so a missing install is one line, not a traceback (docs/viewing.md).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

__all__ = [
    "INSTALL_HINT",
    "NOT_INSTALLED",
    "VIEWER_NAME",
    "VIEWER_URL_EXAMPLE",
    "display_problem",
    "no_viewer_message",
    "rerun_available",
    "viewer_executable",
    "viewer_url_problem",
]

#: the one line when the SDK is missing (it is in the tools extra, pyproject.toml)
INSTALL_HINT = "pip install '.[tools]'"
NOT_INSTALLED = f"rerun-sdk is not installed: {INSTALL_HINT}"
#: the viewer binary rerun-sdk installs beside the interpreter
VIEWER_NAME = "rerun"
#: a running viewer's gRPC address (the viewer prints it at start)
VIEWER_URL_EXAMPLE = "rerun+http://127.0.0.1:9876/proxy"
_SCHEMES = ("rerun", "rerun+http", "rerun+https")


def rerun_available() -> bool:
    """True when rerun-sdk can be imported (found, not imported: cheap)."""
    try:
        return all(importlib.util.find_spec(m) is not None for m in ("rerun", "rerun_bindings"))
    except (ImportError, ValueError):
        return False


def _dirs(python: str | None = None) -> list[Path]:
    """Where pip put the viewer: this interpreter's scripts folder, and the folder of
    ``sys.executable`` itself (a venv's ``bin``, not resolved through its symlink); for
    another interpreter ``python``, its folder."""
    if python is not None:
        return [Path(python).parent]
    out = []
    scripts = sysconfig.get_path("scripts")
    if scripts:
        out.append(Path(scripts))
    if sys.executable:
        out.append(Path(sys.executable).parent)
    return out


def viewer_executable(python: str | None = None) -> str | None:
    """The Rerun viewer to spawn: the one installed with this interpreter's (or ``python``'s)
    rerun-sdk, found even when the venv is not activated, else ``rerun`` on PATH; None when
    there is none."""
    exe = VIEWER_NAME + (".exe" if os.name == "nt" else "")
    for d in _dirs(python):
        p = d / exe
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return shutil.which(VIEWER_NAME)


def display_problem(env: Mapping[str, str] | None = None) -> str | None:
    """Why the desktop viewer cannot open a window here (None: it can try): on Linux and the
    BSDs a window needs X11 or Wayland, and without either the spawned viewer dies at once
    while its caller waits for it (docs/viewing.md, "No display")."""
    env = os.environ if env is None else env
    if not sys.platform.startswith(("linux", "freebsd", "openbsd", "netbsd")):
        return None
    if env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"):
        return None
    return "no display (neither DISPLAY nor WAYLAND_DISPLAY is set)"


def no_viewer_message(python: str | None = None) -> str:
    where = ", ".join(str(d) for d in dict.fromkeys(_dirs(python)))
    return (
        f"no Rerun viewer ({VIEWER_NAME}) beside python ({where}) or on PATH: "
        "pip install '.[tools]', or write a file with --save and open it elsewhere"
    )


def viewer_url_problem(url: str) -> str | None:
    """Why ``url`` is not a viewer's gRPC URL (what rerun would refuse), or None when it is one."""
    want = f"expected a viewer's gRPC URL like {VIEWER_URL_EXAMPLE}"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"{url!r} is not a viewer URL ({exc}); {want}"
    if parts.scheme not in _SCHEMES:
        return f"{url!r} is not a viewer URL (scheme must be one of {', '.join(s + '://' for s in _SCHEMES)}); {want}"  # fmt: skip
    if not parts.hostname:
        return f"{url!r} is not a viewer URL (no host); {want}"
    if parts.path.rstrip("/") != "/proxy":
        return f"{url!r} is not a viewer URL (its path must be /proxy); {want}"
    del port
    return None
