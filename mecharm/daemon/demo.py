"""``python -m mecharm.daemon.demo``: the sim daemon plus a short scripted client, printing each step.

Shows the protocol end to end on loopback: hello, moves (and the safety envelope's
refusal of j1 above 88°, before the firmware would silently ignore it), the gripper, a rejected request, a busy
second client, and the daemon's stats.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from mecharm.common.logging import configure_logging
from mecharm.daemon.backends.sim import SimBackend
from mecharm.daemon.protocol import ErrorResponse, decode_response, encode
from mecharm.daemon.server import run_server
from mecharm.sim.arm import HOME, SimArmConfig

__all__ = ["main", "run_demo"]


class _Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.next_id = reader, writer, 1

    async def call(self, cmd: str, **args: Any) -> Any:
        rid, self.next_id = self.next_id, self.next_id + 1
        self.writer.write(encode({"id": rid, "cmd": cmd, "args": args}))
        resp = decode_response(await self.reader.readline())
        if isinstance(resp, ErrorResponse):
            print(f"  -> {cmd}: error {resp.error.code}: {resp.error.message}")
            return None
        return resp.result


async def _wait_arrival(
    c: _Client, target: list[float], tol: float, timeout: float
) -> tuple[bool, list[float]]:
    deadline = time.monotonic() + timeout
    angles: list[float] = []
    while time.monotonic() < deadline:
        angles = await c.call("get_angles") or []
        if angles and max(abs(a - b) for a, b in zip(angles, target, strict=True)) <= tol:
            return True, angles
        await asyncio.sleep(0.02)
    return False, angles


async def run_demo(time_scale: float = 5.0) -> int:
    backend = SimBackend(config=SimArmConfig(time_scale=time_scale, seed=7))
    async with run_server(backend, "127.0.0.1", 0) as server:
        print(f"sim daemon on 127.0.0.1:{server.port} (time scale {time_scale}x)")
        c = _Client(*await asyncio.open_connection("127.0.0.1", server.port))
        hello = await c.call("hello", client="demo")
        print(
            f"hello: protocol {hello['protocol_version']}, backend {hello['backend']}, "
            f"{len(hello['commands'])} commands"
        )
        print(f"get_angles: {await c.call('get_angles')}")
        await c.call("set_fresh_mode", mode=1)
        print(f"set_fresh_mode 1 -> get_fresh_mode {await c.call('get_fresh_mode')}")
        for pose in ([*HOME], [-31.93, 87.74, -38.33, 18.6, -45.11, -30.0], [*HOME]):
            t0 = time.monotonic()
            await c.call("send_angles", angles=pose, speed=20)
            ok, angles = await _wait_arrival(c, pose, 2.0, 30.0 / time_scale + 2)
            dt = (time.monotonic() - t0) * time_scale
            err = (
                max(abs(a - b) for a, b in zip(angles, pose, strict=True))
                if angles
                else float("nan")
            )
            print(
                f"send_angles {pose} speed 20: arrived={ok} in ~{dt:.1f} s arm time, max error {err:.2f} deg"
            )
        bad = [0.0, 95.0, 0.0, 0.0, 0.0, -30.0]
        await c.call("send_angles", angles=bad, speed=20)
        await asyncio.sleep(1.0 / time_scale + 0.05)
        print(
            f"send_angles with j1=95 (outside the daemon's safety envelope, the arm stays): "
            f"is_moving={await c.call('is_moving')}, "
            f"angles {await c.call('get_angles')}"
        )
        await c.call("set_gripper_value", value=20, speed=100)
        await asyncio.sleep(2.0 / time_scale)
        print(f"gripper close (value 20): get_gripper_value {await c.call('get_gripper_value')}")
        await c.call("set_gripper_state", state=0, speed=50)
        await asyncio.sleep(2.0 / time_scale)
        print(f"gripper open: get_gripper_value {await c.call('get_gripper_value')}")
        print("send_angles with speed 0 (rejected by the daemon):")
        await c.call("send_angles", angles=[*HOME], speed=0)
        r2, w2 = await asyncio.open_connection("127.0.0.1", server.port)
        print(f"second client gets: {(await r2.readline()).decode().strip()}")
        w2.close()
        await c.call("set_fresh_mode", mode=0)
        stats = await c.call("stats")
        print(
            "stats:",
            json.dumps(
                {
                    "counters": stats["counters"],
                    "errors": stats["errors"],
                    "get_angles": stats["latency"].get("get_angles"),
                }
            ),
        )
        c.writer.close()
    print("daemon stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m mecharm.daemon.demo", description=__doc__.splitlines()[0]
    )
    p.add_argument("--time-scale", type=float, default=5.0, help="sim speed-up (default 5)")
    args = p.parse_args(argv)
    configure_logging("warning")
    return asyncio.run(run_demo(args.time_scale))


if __name__ == "__main__":
    sys.exit(main())
