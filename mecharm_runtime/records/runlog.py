"""The per-trial run log (SPEC §8): one JSON file with everything a person needs to
understand a trial afterwards — constants, stages, detections, lookups, moves with
pre/post angles, gripper actions, captures, judgements, correction, tip
measurements and the result with its reason. Written atomically, also on abort.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mecharm_common.fsutil import atomic_write_json
from mecharm_runtime.records.trace import jsonable

__all__ = ["RunLog"]

_SECTIONS = (
    "stages",
    "detections",
    "lookups",
    "guards",
    "moves",
    "gripper",
    "captures",
    "judgements",
    "tip_measurements",
    "servo",
    "side_frames",
)


class RunLog:
    """Accumulates the sections of one trial's run log."""

    def __init__(self, run_stem: str, constants: dict[str, Any], **header: Any) -> None:
        self.data: dict[str, Any] = {"run_stem": run_stem, **jsonable(header), "constants": jsonable(constants)}
        for name in _SECTIONS:
            self.data[name] = []
        self.data["correction"] = None
        self.data["height"] = None
        self.data["result"] = None

    def add(self, section: str, entry: Any) -> None:
        if section not in _SECTIONS:
            raise KeyError(f"unknown run log section {section!r}")
        self.data[section].append(jsonable(entry))

    def set(self, key: str, value: Any) -> None:
        self.data[key] = jsonable(value)

    def write(self, path: Path) -> None:
        atomic_write_json(path, self.data)
