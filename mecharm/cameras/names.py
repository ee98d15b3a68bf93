"""Resolve a camera *name* (e.g. "Iriun") to an OpenCV device index.

Linux: the V4L2 capture nodes are scanned — ``/sys/class/video4linux/videoN/name``
(the driver's device name) and the ``/dev/v4l/by-id/*`` symlinks (USB vendor and
product strings). Only nodes with sysfs ``index`` 0 (the capture node, not the
metadata node a UVC camera also exposes) are considered. The index is N.

macOS: OpenCV's AVFoundation backend numbers cameras in AVFoundation's device
order; ``system_profiler SPCameraDataType`` lists them in that order in
practice, so the position of the first matching name is used. This is best
effort: when two cameras share a name or the order differs, pass the index.

Matching is case-insensitive on a substring; more than one match is an error
naming the candidates.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

__all__ = ["CameraNameError", "list_cameras", "resolve_camera_name"]


class CameraNameError(LookupError):
    """No camera (or more than one) matches the requested name."""


def _linux_cameras(sysfs: Path, by_id: Path) -> list[tuple[int, str]]:
    found: dict[int, list[str]] = {}
    if sysfs.is_dir():
        for node in sorted(sysfs.glob("video*")):
            m = re.fullmatch(r"video(\d+)", node.name)
            if not m:
                continue
            index_file = node / "index"
            try:
                if index_file.exists() and index_file.read_text().strip() not in ("", "0"):
                    continue  # metadata node of a UVC device
                name = (node / "name").read_text().strip()
            except OSError:
                continue
            found.setdefault(int(m.group(1)), []).append(name)
    if by_id.is_dir():
        for link in sorted(by_id.iterdir()):
            try:
                target = os.path.realpath(link)
            except OSError:
                continue
            m = re.fullmatch(r"/dev/video(\d+)", target)
            if m and (not found or int(m.group(1)) in found):
                found.setdefault(int(m.group(1)), []).append(link.name)
    return [(idx, " | ".join(names)) for idx, names in sorted(found.items())]


def _mac_cameras() -> list[tuple[int, str]]:
    try:
        out = subprocess.run(
            ["system_profiler", "SPCameraDataType", "-json"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
        items = json.loads(out).get("SPCameraDataType", [])
    except (OSError, subprocess.SubprocessError, ValueError):
        return []
    return [(i, str(item.get("_name", ""))) for i, item in enumerate(items)]


def list_cameras(
    sysfs: Path = Path("/sys/class/video4linux"), by_id: Path = Path("/dev/v4l/by-id")
) -> list[tuple[int, str]]:
    """(index, names) of the cameras this platform can enumerate."""
    if sys.platform == "darwin":
        return _mac_cameras()
    return _linux_cameras(sysfs, by_id)


def resolve_camera_name(
    name: str,
    sysfs: Path = Path("/sys/class/video4linux"),
    by_id: Path = Path("/dev/v4l/by-id"),
) -> int:
    """The OpenCV index of the one camera whose name contains ``name``."""
    want = name.strip().lower()
    if not want:
        raise CameraNameError("camera name is empty")
    cams = list_cameras(sysfs, by_id)
    hits = [(i, n) for i, n in cams if want in n.lower()]
    if len(hits) == 1:
        return hits[0][0]
    seen = ", ".join(f"{i}: {n}" for i, n in cams) or "none found"
    if not hits:
        raise CameraNameError(f"no camera named {name!r} (cameras: {seen})")
    raise CameraNameError(f"camera name {name!r} is ambiguous (cameras: {seen})")
