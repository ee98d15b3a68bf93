from __future__ import annotations

from typing import Any

from lerobot._registry import device_for
from lerobot.robots.config import RobotConfig


def make_robot_from_config(config: RobotConfig) -> Any:
    return device_for(config)  # a third-party type: its device beside its config
