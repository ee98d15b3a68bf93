"""lerobot's ``Robot`` over ``mecharm.runtime.robot.MecharmRobot`` (the arm: the same calls,
lerobot's errors) and lerobot's own cameras. Everything that touches the arm is the
runtime's own code."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

from lerobot.cameras.utils import make_cameras_from_configs
from lerobot.robots.robot import Robot
from lerobot.utils.errors import DeviceAlreadyConnectedError, DeviceNotConnectedError

from lerobot_robot_mecharm.config_mecharm import MecharmConfig
from mecharm.common.config import load_settings
from mecharm.common.defaults import RUNTIME_CONFIG
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.robot import MecharmRobot


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
        self.arm = MecharmRobot(
            settings,
            max_step_deg=config.max_relative_target,
            trace_path=Path(config.trace_path) if config.trace_path else None,
        )
        self.cameras = make_cameras_from_configs(config.cameras)

    @cached_property
    def observation_features(self) -> dict[str, Any]:
        cams = {n: (c.height, c.width, 3) for n, c in self.config.cameras.items()}
        return {**self.arm.observation_features, **cams}

    @cached_property
    def action_features(self) -> dict[str, Any]:
        return self.arm.action_features

    @property
    def is_connected(self) -> bool:
        return self.arm.is_connected and all(c.is_connected for c in self.cameras.values())

    def connect(self, calibrate: bool = True) -> None:
        if self.is_connected:
            raise DeviceAlreadyConnectedError(f"{self} already connected")
        self.arm.connect()
        try:
            for cam in self.cameras.values():
                cam.connect()
        except BaseException:
            self.disconnect()
            raise

    @property
    def is_calibrated(self) -> bool:
        return self.arm.is_calibrated

    def calibrate(self) -> None:
        self.arm.calibrate()

    def configure(self) -> None:
        self.arm.configure()

    def get_observation(self) -> dict[str, Any]:
        if not self.is_connected:
            raise DeviceNotConnectedError(f"{self} is not connected.")
        obs = self.arm.get_observation()
        for name, cam in self.cameras.items():
            obs[name] = cam.async_read()
        return obs

    def send_action(self, action: dict[str, Any]) -> dict[str, Any]:
        if not self.is_connected:
            raise DeviceNotConnectedError(f"{self} is not connected.")
        return self.arm.send_action(action)

    def disconnect(self) -> None:
        for cam in self.cameras.values():
            if cam.is_connected:
                cam.disconnect()
        self.arm.disconnect()  # safe when it never connected


__all__ = ["Mecharm"]
