from __future__ import annotations

import abc
from dataclasses import dataclass
from pathlib import Path

from lerobot._registry import ChoiceRegistry


@dataclass(kw_only=True)
class TeleoperatorConfig(ChoiceRegistry, abc.ABC):
    id: str | None = None
    calibration_dir: Path | None = None
