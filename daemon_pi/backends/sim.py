"""The ``sim`` backend: the daemon in front of an in-process ``SimArm``."""

from __future__ import annotations

from typing import Any

import serial

from daemon_pi.backends.base import SdkBackend
from daemon_pi.sim.arm import SimArm, SimArmConfig

__all__ = ["SimBackend"]


class SimBackend(SdkBackend):
    """Wraps a SimArm (created from ``config`` or passed in, e.g. shared with a workcell)."""

    name = "sim"
    serial_errors = (serial.SerialException, OSError)

    def __init__(self, arm: SimArm | None = None, config: SimArmConfig | None = None) -> None:
        super().__init__()
        self.arm = arm if arm is not None else SimArm(config or SimArmConfig())
        c = self.arm.config
        # with zero latencies the calls never sleep: the server may run them inline
        self.may_block = any(x > 0 for x in (c.read_latency_s, c.write_latency_s, c.no_reply_s))

    def capabilities(self) -> dict[str, Any]:
        c = self.arm.config
        return {"simulated": True, "time_scale": c.time_scale, "read_latency_s": c.read_latency_s,
                "reject_j1_above": c.reject_j1_above}

    def open(self) -> None:
        self._arm = self.arm

    def close(self) -> None:
        self._arm = None
