"""The ``mycobot`` backend: the real arm through pymycobot's ``MechArm270``."""

from __future__ import annotations

import contextlib
from typing import Any

import serial

from daemon_pi.backends.base import ArmSerialError, SdkBackend

__all__ = ["GRIPPER_TYPE_ADAPTIVE", "MyCobotBackend"]

GRIPPER_TYPE_ADAPTIVE = 1


class MyCobotBackend(SdkBackend):
    """pymycobot ``MechArm270(port, baudrate)``; Pi defaults /dev/ttyAMA0 at 1,000,000 baud."""

    name = "mycobot"
    serial_errors = (serial.SerialException, OSError)

    def __init__(self, port: str = "/dev/ttyAMA0", baudrate: int = 1_000_000) -> None:
        super().__init__()
        self.port = port
        self.baudrate = baudrate

    def capabilities(self) -> dict[str, Any]:
        return {"simulated": False, "serial_port": self.port, "baudrate": self.baudrate}

    def open(self) -> None:
        from pymycobot.mecharm270 import MechArm270  # heavy import; only when used

        try:
            self._arm = MechArm270(self.port, self.baudrate)
        except (serial.SerialException, OSError, ValueError) as exc:
            raise ArmSerialError(
                f"cannot open serial port {self.port} at {self.baudrate} baud: {exc}"
            ) from exc

    # pymycobot 4.0.7 rejects the gripper calls without an explicit gripper type
    # (its MechArm270 check falls through to a generic one that refuses None), so
    # pass 1 = the adaptive gripper, the SDK's documented default. The frame then
    # carries one extra data byte, which the firmware accepts.
    def set_gripper_state(self, state: int, speed: int) -> None:
        self._checked("set_gripper_state", int(state), int(speed), GRIPPER_TYPE_ADAPTIVE)

    def set_gripper_value(self, value: int, speed: int) -> None:
        self._checked("set_gripper_value", int(value), int(speed), GRIPPER_TYPE_ADAPTIVE)

    def close(self) -> None:
        arm, self._arm = self._arm, None
        if arm is not None:
            with contextlib.suppress(serial.SerialException, OSError):
                arm.close()
