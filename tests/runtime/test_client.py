"""Daemon client against the real daemon server: typed errors, ids, timeouts, no silent reconnect."""

from __future__ import annotations

import asyncio
import json

import pytest

from mecharm.daemon.backends.sim import SimBackend
from mecharm.daemon.server import run_server
from mecharm.runtime.arm import DaemonArm
from mecharm.runtime.client import (
    ArmNoReply,
    ArmRefused,
    ClientClosed,
    ConnectionLost,
    DaemonBusy,
    DaemonClient,
    DaemonError,
    DaemonTimeout,
)
from mecharm.runtime.ports import RealClock
from mecharm.sim.arm import SimArm, SimArmConfig

from .conftest import SimDaemon


@pytest.mark.anyio
async def test_hello_and_commands(sim_daemon: SimDaemon) -> None:
    async with DaemonClient("127.0.0.1", sim_daemon.port) as c:
        assert c.hello is not None and c.hello["backend"] == "sim"
        angles = await c.get_angles()
        assert len(angles) == 6 and abs(angles[5] + 30) < 1
        await c.set_fresh_mode(1)
        await c.send_angles([10, 0, 0, 0, 0, -30], 50)
        await c.set_gripper_value(20, 100)
        await c.stop()


@pytest.mark.anyio
async def test_second_client_gets_busy_first_unaffected(sim_daemon: SimDaemon) -> None:
    async with DaemonClient("127.0.0.1", sim_daemon.port) as first:
        second = DaemonClient("127.0.0.1", sim_daemon.port)
        with pytest.raises(DaemonBusy, match="one client"):
            await second.connect()
        assert not second.is_connected
        assert len(await first.get_angles()) == 6


@pytest.mark.anyio
async def test_refused_and_no_reply_are_distinct(sim_daemon: SimDaemon) -> None:
    async with DaemonClient("127.0.0.1", sim_daemon.port) as c:
        with pytest.raises(ArmRefused) as ei:
            await c.send_angles([0, 0, 0, 0, 0, 999], 20)
        assert ei.value.code == "angle_out_of_range" and "j5" in ei.value.message
        with pytest.raises(ArmRefused, match="bad_speed"):
            await c.send_angles([0, 0, 0, 0, 0, 0], 0)
        sim_daemon.arm.faults.fail_reads(1)
        with pytest.raises(ArmNoReply, match="arm_no_reply"):
            await c.get_angles()
        sim_daemon.arm.faults.disconnect()
        with pytest.raises(ArmNoReply, match="serial_error"):
            await c.get_angles()
        sim_daemon.arm.faults.reconnect()
        assert len(await c.get_angles()) == 6  # the connection survived every refusal


@pytest.mark.anyio
async def test_connection_lost_and_no_silent_reconnect(sim_daemon: SimDaemon) -> None:
    c = DaemonClient("127.0.0.1", sim_daemon.port)
    await c.connect()
    await sim_daemon.server.stop("test")
    with pytest.raises(ConnectionLost):
        await c.get_angles()
    with pytest.raises(ConnectionLost):  # stays broken: no reconnect behind our back
        await c.get_angles()
    await c.aclose()
    with pytest.raises(ClientClosed):
        await c.get_angles()


@pytest.mark.anyio
async def test_connect_refused_is_connection_lost(tcp_port: int) -> None:
    with pytest.raises(ConnectionLost, match="cannot connect"):
        await DaemonClient("127.0.0.1", tcp_port).connect()


@pytest.mark.slow
@pytest.mark.anyio
async def test_timeout_closes_the_connection() -> None:
    # a real arm whose reads take 2 s (a hung serial line), client timeout 0.3 s
    arm = SimArm(SimArmConfig(read_latency_s=2.0))
    async with run_server(SimBackend(arm), "127.0.0.1", 0, shutdown_grace_s=0.2) as server:
        c = DaemonClient("127.0.0.1", server.port, request_timeout=0.3)
        await c.connect()
        with pytest.raises(DaemonTimeout, match="get_angles"):
            await c.get_angles()
        with pytest.raises(ConnectionLost, match="no reply"):
            await c.get_angles()
        await c.aclose()


@pytest.mark.anyio
async def test_mismatched_reply_id_is_a_protocol_violation() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            req = json.loads(line)
            rid = req["id"] if req["cmd"] == "hello" else req["id"] + 7
            writer.write(json.dumps({"id": rid, "ok": True, "result": {}}).encode() + b"\n")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        c = DaemonClient("127.0.0.1", port)
        await c.connect()
        with pytest.raises(ConnectionLost, match="does not match request id"):
            await c.get_angles()
        await c.aclose()
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.anyio
async def test_cancelled_request_keeps_the_connection_usable() -> None:
    # reads take 0.3 s: cancel one in flight, then the next request must get its own reply
    arm = SimArm(SimArmConfig(read_latency_s=0.3, initial_angles=(1, 2, 3, 4, 5, 6), noise_deg=0.0))
    async with run_server(SimBackend(arm), "127.0.0.1", 0, shutdown_grace_s=0.5) as server:
        c = DaemonClient("127.0.0.1", server.port, request_timeout=2.0)
        await c.connect()
        task = asyncio.ensure_future(c.get_angles())
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert c.is_connected
        await c.stop()  # the forced-stop path: goes through after the stale reply is dropped
        assert await c.get_angles() == [1, 2, 3, 4, 5, 6]
        await c.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize(
    "result",
    [
        None,
        {},
        {"angles": [1, 2, 3]},
        {"angles": [1, 2, 3, 4, 5, "6"]},
        {"angles": [1, 2, 3, 4, 5, True]},
    ],
    ids=["null", "no-angles", "five-short", "a-string", "a-bool"],
)
async def test_send_reply_without_the_sent_angles_is_an_error_not_a_guess(result: object) -> None:
    """The dataset records what the daemon says it sent: a reply that does not say it is refused
    with a message naming the reply and the fix, and nothing is made up from the request."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            req = json.loads(line)
            writer.write(
                json.dumps({"id": req["id"], "ok": True, "result": result}).encode() + b"\n"
            )
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        c = DaemonClient("127.0.0.1", port)
        await c.connect()
        arm = DaemonArm(c, RealClock())
        with pytest.raises(
            DaemonError, match=r"does not say which angles were sent.*update the daemon"
        ):
            await arm.send_angles([0.0, 10.0, 0.0, 0.0, 0.0, -30.0], 20)
        assert c.is_connected  # a refused reply is a trial error, the connection stays usable
        await c.aclose()
    finally:
        server.close()
        await server.wait_closed()
