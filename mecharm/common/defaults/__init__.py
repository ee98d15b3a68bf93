"""The default settings files and approach arcs, shipped inside the package.

Every command finds its defaults here, whatever the working directory
(docs/setup.md, "Defaults"). ``configs/`` in the repository links to these files; an
operator who wants other values copies one and passes ``--config``.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path, PurePath

__all__ = [
    "APPROACH_PICK_ARC",
    "APPROACH_PLACE_ARC",
    "DAEMON_CONFIG",
    "EXPORT_CONFIG",
    "RECORDER_CONFIG",
    "REPLAY_CONFIG",
    "RUNTIME_CONFIG",
    "default_file",
    "shipped_arc",
]


def default_file(name: str) -> Path:
    """The shipped file ``name`` (e.g. ``"runtime.yaml"``, ``"poses/approach_pick.json"``)."""
    return Path(str(files(__name__).joinpath(name)))


RUNTIME_CONFIG = default_file("runtime.yaml")
DAEMON_CONFIG = default_file("daemon.yaml")
RECORDER_CONFIG = default_file("recorder.yaml")
REPLAY_CONFIG = default_file("replay.yaml")
EXPORT_CONFIG = default_file("export.yaml")
APPROACH_PICK_ARC = default_file("poses/approach_pick.json")
APPROACH_PLACE_ARC = default_file("poses/approach_place.json")

#: where the arcs were before they shipped in the package (relative to the repository)
_OLD_ARC_DIR = PurePath("configs/poses")


def shipped_arc(recorded: Path) -> Path | None:
    """The shipped arc a trace's recorded arc path stood for, when that path is gone: the
    old repository-relative default or a shipped arc of another installation (another
    folder). None for any other path: a custom arc is never swapped for a default."""
    p = PurePath(recorded)
    shipped = default_file(f"poses/{p.name}")
    if not shipped.is_file():
        return None
    if p.parent == _OLD_ARC_DIR or p.parent.parts[-3:] == ("mecharm.common", "defaults", "poses"):
        return shipped
    return None
