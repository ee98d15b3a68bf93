"""lerobot's ``Robot`` over ``mecharm.runtime.robot.MecharmRobot``: the same calls, lerobot's
errors. Everything that touches the arm is the runtime's own code."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from lerobot.robots.robot import Robot
from lerobot.utils.errors import DeviceAlreadyConnectedError, DeviceNotConnectedError

from lerobot_robot_mecharm.config_mecharm import MecharmConfig
from mecharm.common.config import load_settings
from mecharm.common.defaults import RUNTIME_CONFIG
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.robot import CameraSpec, MecharmRobot


class Mecharm(Robot):
    """The mechArm 270 Pi rig: six joints (``j0.pos`` … ``j5.pos``, degrees), the gripper
    (``gripper.pos``, 0 closed … 100 open) and its cameras."""

    config_class = MecharmConfig
    name = "mecharm270"

    def __init__(self, config: MecharmConfig) -> None:
        super().__init__(config)
        self.config = config
        overrides = {
            "daemon.host": config.daemon_host,
            "daemon.port": config.daemon_port,
            "daemon.token_file": config.token_file,
        }
        settings = load_settings(
            RuntimeSettings, config.runtime_config or RUNTIME_CONFIG, overrides
        )
        self.robot = MecharmRobot(
            settings,
            cameras={n: CameraSpec(c.source, c.width, c.height) for n, c in config.cameras.items()},
            max_step_deg=config.max_relative_target,
        )

    @cached_property
    def observation_features(self) -> dict[str, Any]:
        return self.robot.observation_features

    @cached_property
    def action_features(self) -> dict[str, Any]:
        return self.robot.action_features

    @property
    def is_connected(self) -> bool:
        return self.robot.is_connected

    def connect(self, calibrate: bool = True) -> None:
        if self.is_connected:
            raise DeviceAlreadyConnectedError(f"{self} already connected")
        self.robot.connect()

    @property
    def is_calibrated(self) -> bool:
        return self.robot.is_calibrated

    def calibrate(self) -> None:
        self.robot.calibrate()

    def configure(self) -> None:
        self.robot.configure()

    def get_observation(self) -> dict[str, Any]:
        if not self.is_connected:
            raise DeviceNotConnectedError(f"{self} is not connected.")
        return self.robot.get_observation()

    def send_action(self, action: dict[str, Any]) -> dict[str, Any]:
        if not self.is_connected:
            raise DeviceNotConnectedError(f"{self} is not connected.")
        return self.robot.send_action(action)

    def disconnect(self) -> None:
        if not self.is_connected:
            raise DeviceNotConnectedError(f"{self} is not connected.")
        self.robot.disconnect()


__all__ = ["Mecharm"]
