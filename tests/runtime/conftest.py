"""Runtime test fixtures: a real daemon server on loopback in front of a time-scaled SimArm."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest_asyncio

from daemon_pi.backends.sim import SimBackend
from daemon_pi.server import ArmServer, run_server
from mecharm_sim.arm import SimArm, SimArmConfig

TIME_SCALE = 20.0


@dataclass
class SimDaemon:
    server: ArmServer
    arm: SimArm

    @property
    def port(self) -> int:
        return self.server.port


@pytest_asyncio.fixture
async def sim_daemon() -> AsyncIterator[SimDaemon]:
    arm = SimArm(SimArmConfig(time_scale=TIME_SCALE, seed=3, initial_angles=(0, 0, 0, 0, 0, -30)))
    async with run_server(SimBackend(arm), "127.0.0.1", 0, shutdown_grace_s=0.5) as server:
        yield SimDaemon(server, arm)


# ---------------------------------------------------------------- FK table, shared by the workers

import fcntl  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def fk_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default FK table, built once for all xdist workers (file lock) and reused."""
    from mecharm_runtime.lookup import ensure_table, load_table

    shared = tmp_path_factory.getbasetemp().parent / "runtime_fk"
    shared.mkdir(exist_ok=True)
    with open(shared / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        load_table(ensure_table(shared))  # builds the table and its cache once
        fcntl.flock(lock, fcntl.LOCK_UN)
    return shared
