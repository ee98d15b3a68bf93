"""lerobot's ``Teleoperator``: the leader's action is a point on a fixed path at the time
asked, interpolated linearly between waypoints."""

from __future__ import annotations

import itertools
import time
from typing import Any

from lerobot.utils.errors import DeviceAlreadyConnectedError, DeviceNotConnectedError

from lerobot_teleoperator_mecharm.config_scripted import MecharmScriptedConfig
from lerobot_teleoperator_mecharm.leaders import LeaderBase
from mecharm.runtime.robot import GRIPPER_KEY, JOINT_KEYS

#: (fraction of the period, six joint targets in degrees, gripper 0 closed … 100 open):
#: from HOME sideways over the mat and back, closing the jaws halfway; poses high above the
#: mat and away from the box, inside the runtime's limits
PATH: tuple[tuple[float, tuple[float, ...], float], ...] = (
    (0.00, (0.0, 0.0, 0.0, 0.0, 0.0, -30.0), 100.0),
    (0.30, (25.0, 20.0, -15.0, 0.0, -5.0, -30.0), 100.0),
    (0.45, (25.0, 20.0, -15.0, 0.0, -5.0, -30.0), 30.0),
    (0.75, (-25.0, 20.0, -15.0, 0.0, -5.0, -30.0), 30.0),
    (0.85, (-25.0, 20.0, -15.0, 0.0, -5.0, -30.0), 100.0),
    (1.00, (0.0, 0.0, 0.0, 0.0, 0.0, -30.0), 100.0),
)


def path_at(phase: float) -> dict[str, float]:
    """The leader's action at ``phase`` (0-1 of the period)."""
    phase = min(max(phase, 0.0), 1.0)
    for (f0, q0, g0), (f1, q1, g1) in itertools.pairwise(PATH):
        if phase <= f1:
            u = (phase - f0) / (f1 - f0) if f1 > f0 else 1.0
            joints = [a + (b - a) * u for a, b in zip(q0, q1, strict=True)]
            return {**dict(zip(JOINT_KEYS, joints, strict=True)), GRIPPER_KEY: g0 if u < 1 else g1}
    _, q, g = PATH[-1]
    return {**dict(zip(JOINT_KEYS, q, strict=True)), GRIPPER_KEY: g}


class MecharmScripted(LeaderBase):
    """A leader that needs no hardware: the path above, one pass per ``period_s``."""

    config_class = MecharmScriptedConfig
    name = "mecharm_scripted"

    def __init__(self, config: MecharmScriptedConfig) -> None:
        super().__init__(config)
        self.config = config
        self._t0: float | None = None

    @property
    def is_connected(self) -> bool:
        return self._t0 is not None

    def connect(self, calibrate: bool = True) -> None:
        if self._t0 is not None:
            raise DeviceAlreadyConnectedError(f"{self} already connected")
        self._t0 = time.monotonic()

    def get_action(self) -> dict[str, Any]:
        if self._t0 is None:
            raise DeviceNotConnectedError(f"{self} is not connected")
        elapsed = time.monotonic() - self._t0
        return path_at((elapsed % self.config.period_s) / self.config.period_s)

    def disconnect(self) -> None:
        if self._t0 is None:
            raise DeviceNotConnectedError(f"{self} is not connected")
        self._t0 = None
