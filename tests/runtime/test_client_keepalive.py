"""The daemon client keeps its slot (docs/daemon.md, "Client slot"): keepalive pings while
idle, one request at a time; connect() waits out a busy daemon; a dropped connection is
ConnectionLost. Real daemon server on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from mecharm.daemon.backends.sim import SimBackend
from mecharm.daemon.protocol import ErrorCode, error_response
from mecharm.daemon.server import ArmServer, run_server
from mecharm.runtime.client import (
    ArmNoReply,
    ConnectionLost,
    DaemonBusy,
    DaemonClient,
    _error_for,
)
from mecharm.sim.arm import SimArm, SimArmConfig

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def daemon(**kwargs: Any) -> AsyncIterator[ArmServer]:
    arm = SimArm(SimArmConfig(time_scale=20.0, seed=3))
    async with run_server(SimBackend(arm), "127.0.0.1", 0, shutdown_grace_s=0.5, **kwargs) as s:
        yield s


@pytest.mark.slow
async def test_keepalive_holds_the_slot_through_idle_time() -> None:
    async with daemon(idle_timeout_s=1.0) as srv:
        c = DaemonClient("127.0.0.1", srv.port)
        await c.connect()
        assert c.keepalive_interval == pytest.approx(1 / 3)  # a third of what the daemon announced
        holder = srv.client
        async with c.keepalive():
            await anyio.sleep(3.0)  # three idle timeouts without a request of ours
            assert c.is_connected and srv.client == holder
            assert len(await c.get_angles()) == 6
        assert c.pings >= 3
        assert srv.stats.counters.get("idle_timeouts", 0) == 0
        # without it the daemon drops us, and the next request says so
        await anyio.sleep(1.5)
        with pytest.raises(ConnectionLost, match="idle"):
            await c.get_angles()
        await c.aclose()


async def test_pings_and_requests_share_the_connection_one_at_a_time() -> None:
    async with daemon(idle_timeout_s=5.0) as srv:
        c = DaemonClient("127.0.0.1", srv.port, keepalive_s=0.01)  # as often as allowed
        await c.connect()
        assert c.keepalive_interval == 0.05
        async with c.keepalive():
            for _ in range(10):
                assert len(await c.get_angles()) == 6
                await anyio.sleep(0.12)  # room for pings between requests

            async def burst() -> None:
                for _ in range(20):
                    await c.get_angles()

            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(burst)
        assert c.pings >= 1 and c.is_connected
        stats = await c.request("stats")
        assert stats["commands"]["ping"] == c.pings and stats["errors"] == {}
        await c.aclose()


async def test_keepalive_never_wraps_or_hides_the_body_error() -> None:
    async with daemon() as srv:
        c = DaemonClient("127.0.0.1", srv.port)
        await c.connect()
        with pytest.raises(KeyError):
            async with c.keepalive():
                raise KeyError("the body's own error, as itself")
        await c.aclose()


async def test_a_failed_ping_surfaces_at_the_next_request_not_in_the_body() -> None:
    async with daemon(idle_timeout_s=0.3) as srv:
        c = DaemonClient("127.0.0.1", srv.port)
        await c.connect()
        async with c.keepalive():
            await srv.stop("test")
            await anyio.sleep(0.5)  # pings meet the closed daemon; the body goes on
            with pytest.raises(ConnectionLost):
                await c.get_angles()
        await c.aclose()


async def test_connect_waits_out_a_stale_holder() -> None:
    async with daemon(idle_timeout_s=0.5) as srv:
        r, w = await asyncio.open_connection("127.0.0.1", srv.port)
        w.write(b'{"id": 1, "cmd": "get_angles"}\n')  # takes the slot, then goes silent
        await w.drain()
        assert (await r.readline()).startswith(b'{"id":1,"ok":true')
        with pytest.raises(DaemonBusy, match="one client at a time"):
            await DaemonClient("127.0.0.1", srv.port).connect()  # busy_wait_s 0: at once
        c = DaemonClient("127.0.0.1", srv.port, busy_wait_s=10.0)
        hello = await c.connect()  # busy until the daemon drops the silent holder
        assert hello["backend"] == "sim" and len(await c.get_angles()) == 6
        assert srv.stats.counters["idle_timeouts"] == 1
        assert srv.stats.counters["busy_rejections"] >= 2
        await c.aclose()
        w.close()


async def test_arm_unavailable_is_an_arm_no_reply() -> None:
    err = _error_for(error_response(3, ErrorCode.ARM_UNAVAILABLE, "serial link lost; reopening"))
    assert isinstance(err, ArmNoReply) and err.code == "arm_unavailable"
    err = _error_for(error_response(None, ErrorCode.IDLE_TIMEOUT, "closing the connection"))
    assert isinstance(err, ConnectionLost)
