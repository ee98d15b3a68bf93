"""lerobot's ``Camera`` over the project's MJPEG reader."""

from __future__ import annotations

import time
from typing import Any

import cv2
import numpy as np
from lerobot.cameras.camera import Camera
from lerobot.cameras.configs import ColorMode
from lerobot.utils.errors import DeviceAlreadyConnectedError, DeviceNotConnectedError
from numpy.typing import NDArray

from lerobot_camera_mecharm.config_mjpeg import MjpegHttpConfig
from mecharm.cameras.base import CameraError, fit_image
from mecharm.cameras.mjpeg_http import MjpegHttpCamera


class MjpegHttp(Camera):
    """An HTTP MJPEG stream: ``read``/``async_read`` return the next frame (waiting up to
    the timeout), ``read_latest`` the newest one without waiting."""

    def __init__(self, config: MjpegHttpConfig) -> None:
        super().__init__(config)
        self.config = config
        self._cam: MjpegHttpCamera | None = None

    def __str__(self) -> str:
        return f"{self.__class__.__name__}({self.config.url})"

    @property
    def is_connected(self) -> bool:
        return self._cam is not None

    @staticmethod
    def find_cameras() -> list[dict[str, Any]]:
        return []  # a URL is named, not found

    def connect(self, warmup: bool = True) -> None:
        if self._cam is not None:
            raise DeviceAlreadyConnectedError(f"{self} is already connected")
        cam = MjpegHttpCamera(self.config.url, read_timeout=self.config.read_timeout_ms / 1000)
        try:
            cam.open()
        except CameraError as exc:
            raise ConnectionError(f"{self}: {exc}") from None
        self._cam = cam
        first = self._next(self.config.read_timeout_ms)
        if self.width is None or self.height is None:  # the stream's own size
            self.height, self.width = first.shape[:2]
            self.config.height, self.config.width = self.height, self.width

    def _finish(self, bgr: NDArray[Any]) -> NDArray[Any]:
        return fit_image(bgr, self.width, self.height, rgb=self.config.color_mode == ColorMode.RGB)

    def _next(self, timeout_ms: float) -> NDArray[Any]:
        if self._cam is None:
            raise DeviceNotConnectedError(f"{self} is not connected")
        self._cam.read_timeout = timeout_ms / 1000
        frame = self._cam.read()
        if not frame.ok or frame.image is None:
            raise TimeoutError(f"{self}: no new frame within {timeout_ms:g} ms")
        return self._finish(frame.image)

    def read(self) -> NDArray[Any]:
        return self._next(self.config.read_timeout_ms)

    def async_read(self, timeout_ms: float = 200) -> NDArray[Any]:
        return self._next(timeout_ms)

    def read_latest(self, max_age_ms: int = 500) -> NDArray[Any]:
        if self._cam is None:
            raise DeviceNotConnectedError(f"{self} is not connected")
        newest = self._cam.newest()
        if newest is None:
            raise RuntimeError(f"{self}: no frame yet")
        data, _wall, mono_ns = newest
        age_ms = (time.monotonic_ns() - mono_ns) / 1e6
        if age_ms > max_age_ms:
            raise TimeoutError(f"{self}: newest frame is {age_ms:.0f} ms old (max {max_age_ms})")
        img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        if img is None:
            raise RuntimeError(f"{self}: the newest frame is not a JPEG")
        return self._finish(img)

    def disconnect(self) -> None:
        if self._cam is None:
            raise DeviceNotConnectedError(f"{self} is not connected")
        cam, self._cam = self._cam, None
        cam.close()
