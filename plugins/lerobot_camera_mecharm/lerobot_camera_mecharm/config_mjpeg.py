"""``type: mjpeg_http``: the stream's URL, the size and colour order lerobot gets."""

from __future__ import annotations

from dataclasses import dataclass

from lerobot.cameras.configs import CameraConfig, ColorMode


@CameraConfig.register_subclass("mjpeg_http")
@dataclass
class MjpegHttpConfig(CameraConfig):
    #: the MJPEG stream, e.g. the simulated rig's http://127.0.0.1:8081/top.mjpg
    url: str = ""
    color_mode: ColorMode = ColorMode.RGB
    #: how long a read waits for a frame newer than the last one (then TimeoutError)
    read_timeout_ms: float = 2000.0

    def __post_init__(self) -> None:
        if not self.url.startswith("http://"):
            raise ValueError(
                f"mjpeg_http camera: url must be http://host[:port]/path, got {self.url!r}"
            )
        self.color_mode = ColorMode(self.color_mode)
