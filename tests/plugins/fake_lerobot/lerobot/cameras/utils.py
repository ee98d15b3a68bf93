from __future__ import annotations

from typing import Any

from lerobot._registry import device_for
from lerobot.cameras.configs import CameraConfig


def make_cameras_from_configs(configs: dict[str, CameraConfig]) -> dict[str, Any]:
    return {key: device_for(cfg) for key, cfg in configs.items()}
