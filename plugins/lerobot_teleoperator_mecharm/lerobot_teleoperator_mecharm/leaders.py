"""lerobot's ``Teleoperator`` over the runtime's leaders (``mecharm.runtime.leaders``): the
same calls, lerobot's errors. Everything that reads an arm or a key is the runtime's code."""

from __future__ import annotations

from typing import Any

from lerobot.teleoperators.teleoperator import Teleoperator
from lerobot.utils.errors import DeviceAlreadyConnectedError, DeviceNotConnectedError

from lerobot_teleoperator_mecharm.config_leaders import MecharmKeyboardConfig, MecharmLeaderConfig
from mecharm.common.config import load_settings
from mecharm.common.defaults import RUNTIME_CONFIG
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.control import GRIPPER_KEY, JOINT_KEYS
from mecharm.runtime.leaders import DragTeachLeader, KeyboardLeader


def _settings(runtime_config: str | None, overrides: dict[str, Any]) -> RuntimeSettings:
    return load_settings(RuntimeSettings, runtime_config or RUNTIME_CONFIG, overrides)


class LeaderBase(Teleoperator):
    """What the mecharm leaders share: the robot's action features, no calibration, no
    feedback; connecting, reading and disconnecting go to ``self.leader`` (a runtime leader)."""

    leader: DragTeachLeader | KeyboardLeader

    @property
    def action_features(self) -> dict[str, type]:
        return {**dict.fromkeys(JOINT_KEYS, float), GRIPPER_KEY: float}

    @property
    def feedback_features(self) -> dict[str, type]:
        return {}

    @property
    def is_connected(self) -> bool:
        return self.leader.is_connected

    def connect(self, calibrate: bool = True) -> None:
        if self.is_connected:
            raise DeviceAlreadyConnectedError(f"{self} already connected")
        self.leader.connect()

    @property
    def is_calibrated(self) -> bool:
        return True

    def calibrate(self) -> None:
        pass  # the mechArm's joint zeros are the firmware's

    def configure(self) -> None:
        pass

    def get_action(self) -> dict[str, Any]:
        if not self.is_connected:
            raise DeviceNotConnectedError(f"{self} is not connected")
        return self.leader.get_action()

    def send_feedback(self, feedback: dict[str, Any]) -> None:
        pass  # neither leader has anything to feel with

    def disconnect(self) -> None:
        if not self.is_connected:
            raise DeviceNotConnectedError(f"{self} is not connected")
        self.leader.disconnect()


class MecharmLeader(LeaderBase):
    """A second mechArm in drag-teach: its servos released, its joints read through its
    own daemon (docs/lerobot-robot.md, "Leaders")."""

    config_class = MecharmLeaderConfig
    name = "mecharm_leader"

    def __init__(self, config: MecharmLeaderConfig) -> None:
        super().__init__(config)
        self.config = config
        daemon = {
            "daemon.host": config.daemon_host,
            "daemon.port": config.daemon_port,
            "daemon.token_file": config.token_file,
        }
        self.leader = DragTeachLeader(_settings(config.runtime_config, daemon))


class MecharmKeyboard(LeaderBase):
    """Keys in the terminal nudge a pose from HOME (docs/lerobot-robot.md, "Leaders")."""

    config_class = MecharmKeyboardConfig
    name = "mecharm_keyboard"

    def __init__(self, config: MecharmKeyboardConfig) -> None:
        super().__init__(config)
        self.config = config
        s = _settings(config.runtime_config, {})
        self.leader = KeyboardLeader(
            s.arm.home, step_deg=config.step_deg, close_value=s.arm.gripper_close_value
        )
