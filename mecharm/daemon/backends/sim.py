"""The ``sim`` backend: the daemon in front of an in-process ``SimArm``."""

from __future__ import annotations

from typing import Any

import serial

from mecharm.daemon.backends.base import SdkBackend
from mecharm.sim.arm import SimArm, SimArmConfig

__all__ = ["SimBackend"]

_READS = frozenset({"get_angles", "get_gripper_value", "get_fresh_mode", "is_moving"})


class SimBackend(SdkBackend):
    """Wraps a SimArm (created from ``config`` or passed in, e.g. shared with a workcell)."""

    name = "sim"
    serial_errors = (serial.SerialException, OSError)

    def __init__(self, arm: SimArm | None = None, config: SimArmConfig | None = None) -> None:
        super().__init__()
        self.arm = arm if arm is not None else SimArm(config or SimArmConfig())

    def capabilities(self) -> dict[str, Any]:
        c = self.arm.config
        return {
            "simulated": True,
            "time_scale": c.time_scale,
            "read_latency_s": c.read_latency_s,
            "reject_j1_above": c.reject_j1_above,
        }

    def time_scale(self) -> float:
        return self.arm.config.time_scale

    def blocks(self, call: str) -> bool:
        """Calls sleep only for their configured latency (or a pending no-reply fault)."""
        c = self.arm.config
        if call in _READS:
            return c.read_latency_s > 0 or (
                c.no_reply_s > 0 and self.arm.faults.pending_read_failures > 0
            )
        if call in ("open", "close"):
            return False
        if call.startswith("set_gripper_"):  # a gripper command holds the call (profile timing)
            return c.write_latency_s > 0 or c.gripper_command_s > 0
        return c.write_latency_s > 0

    def open(self) -> None:
        self._arm = self.arm

    def close(self) -> None:
        self._arm = None
