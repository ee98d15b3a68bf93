"""The LeRobot robot's tick rate: one ``get_observation`` plus one ``send_action`` through the
safe arm, against the protocol's own limit (docs/lerobot-robot.md).

A simulated daemon process in real time (time scale 1: its reads and writes take the
rig's latencies), on loopback. Per tick the robot reads the joints, bounds the step,
checks the pose and the path, sends, and traces the step; the baseline is a raw
``DaemonClient`` doing the least a tick can do over the same link: ``get_angles`` then
``send_angles`` (no guard, no path check, no trace). Both as fast as they go (lerobot
asks 30 Hz of a loop; what a tick costs decides whether it gets it). A third figure adds
the top camera (its next MJPEG frame, resized to 640×360) to the robot's observation: a
camera read waits for a frame newer than the last one, as lerobot's cameras' reads do,
so that tick runs at most at the camera's frame rate (the simulated top camera: 10 fps).
The ratio robot / baseline is what the safety layer and the sync facade cost.
"""

from __future__ import annotations

import asyncio
import math
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import Row, has
from mecharm.common.config import load_settings
from mecharm.common.logging import configure_logging
from mecharm.runtime.client import DaemonClient
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.robot import JOINT_KEYS, CameraSpec, MecharmRobot
from mecharm.tools.simrig import start_sim_daemon

__all__ = ["UNDER_LOAD", "rows", "run"]

UNDER_LOAD = True


def _pose(i: int) -> tuple[float, ...]:
    """A slow sway of j0 around HOME: every step within any bound, never refused."""
    return (10.0 * math.sin(i / 15.0), 0.0, 0.0, 0.0, 0.0, -30.0)


async def _raw_hz(port: int, n: int) -> float:
    async with DaemonClient("127.0.0.1", port, request_timeout=4.0) as c:
        await c.set_fresh_mode(1)
        await c.get_angles()
        t0 = time.perf_counter()
        for i in range(n):
            await c.get_angles()
            await c.send_angles(_pose(i), 50)
        return n / (time.perf_counter() - t0)


def _robot_hz(settings: RuntimeSettings, n: int, camera: str | None) -> float:
    cams = {"top": CameraSpec(camera, 640, 360)} if camera else {}
    robot = MecharmRobot(settings, cameras=cams, max_step_deg=5.0)
    robot.connect()
    try:
        robot.get_observation()
        t0 = time.perf_counter()
        for i in range(n):
            robot.get_observation()
            robot.send_action(dict(zip(JOINT_KEYS, _pose(i), strict=True)))
        return n / (time.perf_counter() - t0)
    finally:
        robot.disconnect()


def run(quick: bool = False) -> dict[str, Any]:
    configure_logging("warning")
    n = 60 if quick else 300
    with tempfile.TemporaryDirectory(prefix="bench_robot_") as tmp:
        sim = start_sim_daemon(Path(tmp) / "logs", time_scale=1.0)
        try:
            settings = load_settings(
                RuntimeSettings,
                overrides={"data_root": Path(tmp), "daemon.port": sim.daemon_port},
            )
            raw = asyncio.run(_raw_hz(sim.daemon_port, n))
            robot = _robot_hz(settings, n, None)
            with_cam = _robot_hz(settings, n, sim.top_url)
        finally:
            sim.daemon.stop()
    return {
        "ticks": n,
        "raw_read_send_hz": round(raw, 1),
        "robot_tick_hz": round(robot, 1),
        "robot_tick_with_top_camera_hz": round(with_cam, 1),
        "robot_vs_raw": round(robot / raw, 2),
    }


def rows(result: dict[str, Any]) -> list[Row]:
    r = result
    if not has(r, "robot_tick_hz", "raw_read_send_hz", "robot_vs_raw"):
        return []
    return [
        Row(
            "lerobot robot",
            "ticks per second, get_observation + send_action through the safe arm "
            "(sim daemon in real time)",
            f"{r['robot_tick_hz']} Hz ({r['robot_vs_raw']}× raw); with the top camera "
            f"{r.get('robot_tick_with_top_camera_hz')} Hz (its 10 fps)",
            "≥ 30 Hz",
            f"raw get_angles + send_angles {r['raw_read_send_hz']} Hz",
        )
    ]
