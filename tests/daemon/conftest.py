"""Fixtures of the daemon tests: a fast SimArm, a real server on a free loopback port,
a newline-JSON client over a real socket, and the serial firmware emulator."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from mecharm.daemon.backends.sim import SimBackend
from mecharm.daemon.server import ArmServer, run_server
from mecharm.sim.arm import SimArm, SimArmConfig
from mecharm.sim.firmware import FirmwareEmulator

FAST = {"time_scale": 50.0, "seed": 3}


class LineClient:
    """Minimal newline-delimited JSON client over a real TCP connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self._next = 1

    @classmethod
    async def connect(cls, port: int, host: str = "127.0.0.1") -> LineClient:
        r, w = await asyncio.open_connection(host, port, limit=1 << 20)
        return cls(r, w)

    async def send_raw(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def recv(self, timeout: float = 10.0) -> dict[str, Any]:
        line = await asyncio.wait_for(self.reader.readline(), timeout)
        assert line, "connection closed by the daemon"
        assert line.endswith(b"\n")
        return json.loads(line)  # type: ignore[no-any-return]

    async def call(
        self, cmd: str, args: dict[str, Any] | None = None, timeout: float = 10.0
    ) -> dict[str, Any]:
        rid = self._next
        self._next += 1
        await self.send_raw(
            json.dumps({"id": rid, "cmd": cmd, "args": args or {}}).encode() + b"\n"
        )
        resp = await self.recv(timeout)
        assert resp["id"] == rid
        return resp

    async def call_raw(self, data: bytes, timeout: float = 10.0) -> dict[str, Any]:
        """Send one raw line and return the reply, whatever its id."""
        await self.send_raw(data)
        return await self.recv(timeout)

    async def ok(self, cmd: str, args: dict[str, Any] | None = None, timeout: float = 10.0) -> Any:
        resp = await self.call(cmd, args, timeout)
        assert resp["ok"] is True, resp
        return resp["result"]

    async def at_eof(self, timeout: float = 5.0) -> bool:
        data = await asyncio.wait_for(self.reader.read(), timeout)
        return data == b""

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()


@pytest.fixture
def sim_arm() -> SimArm:
    return SimArm(SimArmConfig(**FAST))


@pytest.fixture
async def server(sim_arm: SimArm) -> AsyncIterator[ArmServer]:
    async with run_server(SimBackend(sim_arm), "127.0.0.1", 0) as srv:
        yield srv


@pytest.fixture
async def client(server: ArmServer) -> AsyncIterator[LineClient]:
    c = await LineClient.connect(server.port)
    yield c
    await c.close()


@pytest.fixture
def emulator() -> Iterator[FirmwareEmulator]:
    arm = SimArm(
        SimArmConfig(
            time_scale=50.0, seed=5, read_latency_s=0.0, write_latency_s=0.0, no_reply_s=0.0
        )
    )
    emu = FirmwareEmulator(arm, read_reply_s=0.002, write_reply_s=0.001)
    emu.start()
    yield emu
    emu.close()
