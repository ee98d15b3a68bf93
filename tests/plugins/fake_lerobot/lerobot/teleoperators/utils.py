from __future__ import annotations

from typing import Any

from lerobot._registry import device_for
from lerobot.teleoperators.config import TeleoperatorConfig


def make_teleoperator_from_config(config: TeleoperatorConfig) -> Any:
    return device_for(config)
