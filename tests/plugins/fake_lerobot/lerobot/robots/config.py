from __future__ import annotations

import abc
from dataclasses import dataclass
from pathlib import Path

from lerobot._registry import ChoiceRegistry


@dataclass(kw_only=True)
class RobotConfig(ChoiceRegistry, abc.ABC):
    id: str | None = None
    calibration_dir: Path | None = None

    def __post_init__(self) -> None:
        # as lerobot's: every camera of a robot must say its width, height and fps
        for cam in (getattr(self, "cameras", None) or {}).values():
            for attr in ("width", "height", "fps"):
                if getattr(cam, attr) is None:
                    raise ValueError(
                        f"Specifying '{attr}' is required for the camera to be used in a robot"
                    )
