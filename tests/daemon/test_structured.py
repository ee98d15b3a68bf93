"""The server as a task of the caller's anyio task group (how mecharm-daemon runs it)."""

from __future__ import annotations

import anyio
import pytest

from mecharm.daemon.backends.sim import SimBackend
from mecharm.daemon.server import ArmServer
from mecharm.sim.arm import SimArm, SimArmConfig

from .conftest import FAST, LineClient

pytestmark = pytest.mark.anyio


async def test_run_in_a_task_group_serves_and_stops() -> None:
    server = ArmServer(SimBackend(SimArm(SimArmConfig(**FAST))), "127.0.0.1", 0)
    async with anyio.create_task_group() as tg:
        await tg.start(server.run)
        c = await LineClient.connect(server.port)
        assert len(await c.ok("get_angles")) == 6
        await server.stop("test")
        assert await c.at_eof()  # the connection's task ended with the server
        await c.close()
    assert server.backend._arm is None  # closed


async def test_port_in_use_is_raised_by_start_and_the_backend_closed(server: ArmServer) -> None:
    backend = SimBackend(SimArm(SimArmConfig(**FAST)))
    other = ArmServer(backend, "127.0.0.1", server.port)
    async with anyio.create_task_group() as tg:
        with pytest.raises(OSError):
            await tg.start(other.run)
    assert backend._arm is None


async def test_cancelling_the_owning_group_drops_the_client() -> None:
    """A forced exit (second signal) cancels the group: no connection task outlives it."""
    server = ArmServer(SimBackend(SimArm(SimArmConfig(**FAST))), "127.0.0.1", 0)
    async with anyio.create_task_group() as tg:
        await tg.start(server.run)
        c = await LineClient.connect(server.port)
        assert len(await c.ok("get_angles")) == 6
        tg.cancel_scope.cancel()
    assert await c.at_eof()
    assert server.client is None
    await c.close()
    await server.stop("after cancel")  # returns at once: the server has already stopped
