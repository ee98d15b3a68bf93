"""``--teleop.type=mecharm_scripted``: how long one pass of the path takes."""

from __future__ import annotations

from dataclasses import dataclass

from lerobot.teleoperators.config import TeleoperatorConfig


@TeleoperatorConfig.register_subclass("mecharm_scripted")
@dataclass
class MecharmScriptedConfig(TeleoperatorConfig):
    #: seconds for one pass of the path; it starts again from HOME after it
    period_s: float = 6.0

    def __post_init__(self) -> None:
        if not 1.0 <= self.period_s <= 600.0:
            raise ValueError(f"period_s {self.period_s!r}: give 1-600 seconds")
