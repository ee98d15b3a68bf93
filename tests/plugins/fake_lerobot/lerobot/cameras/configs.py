from __future__ import annotations

import abc
from dataclasses import dataclass
from enum import Enum

from lerobot._registry import ChoiceRegistry


class ColorMode(str, Enum):  # noqa: UP042 - as lerobot declares it
    RGB = "rgb"
    BGR = "bgr"


@dataclass(kw_only=True)
class CameraConfig(ChoiceRegistry, abc.ABC):
    fps: int | None = None
    width: int | None = None
    height: int | None = None
