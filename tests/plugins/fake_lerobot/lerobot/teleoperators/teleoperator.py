from __future__ import annotations

import abc
import os
from pathlib import Path
from typing import Any

from lerobot.teleoperators.config import TeleoperatorConfig


class Teleoperator(abc.ABC):
    config_class: type[TeleoperatorConfig]
    name: str

    def __init__(self, config: TeleoperatorConfig) -> None:
        self.id = config.id
        base = Path(
            os.environ.get("HF_LEROBOT_CALIBRATION", Path.home() / ".cache/lerobot/calibration")
        )
        self.calibration_dir = config.calibration_dir or base / "teleoperators" / self.name
        self.calibration_dir.mkdir(parents=True, exist_ok=True)

    def __str__(self) -> str:
        return f"{self.id} {self.__class__.__name__}"

    @property
    @abc.abstractmethod
    def action_features(self) -> dict: ...

    @property
    @abc.abstractmethod
    def feedback_features(self) -> dict: ...

    @property
    @abc.abstractmethod
    def is_connected(self) -> bool: ...

    @abc.abstractmethod
    def connect(self, calibrate: bool = True) -> None: ...

    @property
    @abc.abstractmethod
    def is_calibrated(self) -> bool: ...

    @abc.abstractmethod
    def calibrate(self) -> None: ...

    @abc.abstractmethod
    def configure(self) -> None: ...

    @abc.abstractmethod
    def get_action(self) -> dict[str, Any]: ...

    @abc.abstractmethod
    def send_feedback(self, feedback: dict[str, Any]) -> None: ...

    @abc.abstractmethod
    def disconnect(self) -> None: ...
