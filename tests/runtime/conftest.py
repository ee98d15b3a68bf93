"""Runtime test fixtures: a real daemon server on loopback in front of a time-scaled SimArm."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mecharm.common.config import load_settings
from mecharm.daemon.backends.sim import SimBackend
from mecharm.daemon.server import ArmServer, run_server
from mecharm.runtime.config import RuntimeSettings
from mecharm.sim.arm import SimArm, SimArmConfig

TIME_SCALE = 20.0


@dataclass
class SimDaemon:
    server: ArmServer
    arm: SimArm

    @property
    def port(self) -> int:
        return self.server.port


@pytest.fixture
async def sim_daemon() -> AsyncIterator[SimDaemon]:
    arm = SimArm(SimArmConfig(time_scale=TIME_SCALE, seed=3, initial_angles=(0, 0, 0, 0, 0, -30)))
    async with run_server(SimBackend(arm), "127.0.0.1", 0, shutdown_grace_s=0.5) as server:
        yield SimDaemon(server, arm)


def trial_settings(root: Path, fk: Path, **kw: Any) -> RuntimeSettings:
    """Settings of a trial against ``sim_daemon``: this data root and FK dir, time-scaled, no
    recorder; ``kw`` overrides any key."""
    return load_settings(
        RuntimeSettings,
        overrides={
            "data_root": root,
            "fk_data_dir": fk,
            "time_scale": TIME_SCALE,
            "recorder_enabled": False,
            # the rig's 8 s arrival minimum is 0.4 s at TIME_SCALE: the daemon runs on the
            # test's own event loop, and on a loaded machine a send reached the simulated arm
            # late enough that a 39° move had done 11° at that deadline (CI under load); 1 s
            # keeps every stall a stall (the faults never arrive at all) without that race
            "arrival_min_s": 20.0,
            **kw,
        },
    )
