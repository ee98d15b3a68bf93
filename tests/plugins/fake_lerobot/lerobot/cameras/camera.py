from __future__ import annotations

import abc
from typing import Any

from lerobot.cameras.configs import CameraConfig


class Camera(abc.ABC):
    def __init__(self, config: CameraConfig) -> None:
        self.fps = config.fps
        self.width = config.width
        self.height = config.height

    @property
    @abc.abstractmethod
    def is_connected(self) -> bool: ...

    @staticmethod
    @abc.abstractmethod
    def find_cameras() -> list[dict[str, Any]]: ...

    @abc.abstractmethod
    def connect(self, warmup: bool = True) -> None: ...

    @abc.abstractmethod
    def read(self) -> Any: ...

    @abc.abstractmethod
    def async_read(self, timeout_ms: float = 200) -> Any: ...

    @abc.abstractmethod
    def disconnect(self) -> None: ...
