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
import itertools
import math
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import Row, has
from mecharm.common.config import load_settings
from mecharm.common.logging import configure_logging
from mecharm.daemon.backends.mycobot import MyCobotBackend
from mecharm.daemon.server import run_server
from mecharm.runtime.client import DaemonClient
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.robot import JOINT_KEYS, CameraSpec, MecharmRobot
from mecharm.sim.arm import SimArm, SimArmConfig
from mecharm.sim.firmware import FirmwareEmulator
from mecharm.tools.simrig import start_sim_daemon

#: the rate lerobot asks of a loop, and what holding it means (docs/lerobot-robot.md)
RATE_HZ = 30.0
#: the gripper run: 12 s at 30 Hz, a close at 1 s and an open at 6 s, each held 4 s
GRIPPER_TICKS = 360

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


def _held(
    settings: RuntimeSettings, n: int, gripper: Callable[[int], float | None] = lambda i: None
) -> dict[str, float]:
    """``n`` ticks on a fixed 30 Hz schedule (tick k due k/30 s after the start; a late tick
    runs at once, the next is due on the schedule again): the periods between tick starts.
    ``gripper(i)``: the gripper value tick ``i`` asks for, if any (a policy's output: asked
    every tick, sent when it changes)."""
    robot = MecharmRobot(settings, max_step_deg=5.0)
    robot.connect()
    try:
        robot.get_observation()
        starts: list[float] = []
        seen: list[float] = []  # j0 as each tick read it: did the arm follow the sway?
        t0 = time.perf_counter()
        for i in range(n):
            due = t0 + i / RATE_HZ
            time.sleep(max(0.0, due - time.perf_counter()))
            starts.append(time.perf_counter())
            seen.append(float(robot.get_observation()[JOINT_KEYS[0]]))
            action = dict(zip(JOINT_KEYS, _pose(i), strict=True))
            value = gripper(i)
            if value is not None:
                action["gripper.pos"] = value
            robot.send_action(action)
    finally:
        robot.disconnect()
    periods = sorted((b - a) * 1000 for a, b in itertools.pairwise(starts))
    return {
        "median_ms": round(statistics.median(periods), 1),
        "p99_ms": round(periods[min(len(periods) - 1, int(0.99 * len(periods)))], 1),
        "held_hz": round((len(starts) - 1) / (starts[-1] - starts[0]), 1),
        "max_ms": round(periods[-1], 1),
        # the sway asks j0 over 20° (±10°); a tick that sends but does not move the arm
        # would hold the rate just as well
        "j0_swept_deg": round(max(seen) - min(seen), 1),
    }


@contextmanager
def _emulated_daemon() -> Iterator[int]:
    """The mycobot backend (real pymycobot) over the serial firmware emulator, in real time,
    served on loopback from its own thread: the daemon as the Pi runs it, the arm emulated."""
    cfg = SimArmConfig(time_scale=1.0, seed=5, initial_angles=(0.0, 0.0, 0.0, 0.0, 0.0, -30.0))
    emu = FirmwareEmulator(SimArm(cfg))  # the firmware's default reply delays (~18 ms reads)
    emu.start()
    ready, stop, port = threading.Event(), threading.Event(), [0]

    async def serve() -> None:
        async with run_server(MyCobotBackend(emu.path, 1_000_000), "127.0.0.1", 0) as srv:
            port[0] = srv.port
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.05)

    t = threading.Thread(target=lambda: asyncio.run(serve()), name="bench-daemon", daemon=True)
    t.start()
    try:
        if not ready.wait(30):
            raise RuntimeError("the emulated daemon did not start")
        yield port[0]
    finally:
        stop.set()
        t.join(10)
        emu.close()


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
            held_sim = _held(settings, n)
        finally:
            sim.daemon.stop()
        # the rig profile: a gripper command holds the SDK call 4 s (docs/simulation-timing.md):
        # closed from tick 30, open from tick 180 (5 s later: after the close returned), 12 s
        rig = start_sim_daemon(
            Path(tmp) / "logs_rig", time_scale=1.0, extra_args=["--sim-profile", "rig"]
        )
        try:
            rig_settings = settings.updated({"daemon.port": rig.daemon_port})
            held_grip = _held(
                rig_settings, GRIPPER_TICKS, lambda i: None if i < 30 else 0.0 if i < 180 else 100.0
            )
        finally:
            rig.daemon.stop()
        with _emulated_daemon() as port:
            emu_settings = settings.updated({"daemon.port": port})
            raw_emu = asyncio.run(_raw_hz(port, n))
            held_emu = _held(emu_settings, n)
    return {
        "ticks": n,
        "raw_read_send_hz": round(raw, 1),
        "robot_tick_hz": round(robot, 1),
        "robot_tick_with_top_camera_hz": round(with_cam, 1),
        "robot_vs_raw": round(robot / raw, 2),
        **{f"held30_sim_{k}": v for k, v in held_sim.items()},
        **{f"held30_gripper_rig_{k}": v for k, v in held_grip.items()},
        "raw_read_send_emulator_hz": round(raw_emu, 1),
        **{f"held30_emulator_{k}": v for k, v in held_emu.items()},
    }


def _held_rows(r: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(result key, what ran, the same run's baseline) of each held-rate row."""
    sim = ("sim", "sim daemon in real time", f"raw read+send {r.get('raw_read_send_hz')} Hz")
    emu = (
        "emulator",
        "pymycobot over the firmware emulator",
        f"raw read+send {r.get('raw_read_send_emulator_hz')} Hz",
    )
    return [sim, emu]


def rows(result: dict[str, Any]) -> list[Row]:
    r = result
    if not has(r, "robot_tick_hz", "raw_read_send_hz", "robot_vs_raw"):
        return []
    held = [
        Row(
            "lerobot robot",
            f"30 Hz held, get_observation + send_action, step bound on, {label}",
            f"period median {r[f'held30_{key}_median_ms']} ms, p99 {r[f'held30_{key}_p99_ms']} ms "
            f"({r[f'held30_{key}_held_hz']} Hz); the arm swept "
            f"{r.get(f'held30_{key}_j0_swept_deg')}° of the 20° asked",
            "median ≤ 34 ms, p99 ≤ 50 ms",
            base,
        )
        for key, label, base in _held_rows(r)
        if has(r, f"held30_{key}_median_ms", f"held30_{key}_p99_ms")
    ]
    grip = "held30_gripper_rig_max_ms"
    if has(r, grip):
        held.append(
            Row(
                "lerobot robot",
                "30 Hz held while the gripper closes and opens (sim daemon, rig profile: each "
                "gripper command holds the SDK call 4 s; the ticks hold the joints meanwhile)",
                f"period median {r.get('held30_gripper_rig_median_ms')} ms, p99 "
                f"{r.get('held30_gripper_rig_p99_ms')} ms, longest {r[grip]} ms",
                "median ≤ 34 ms, p99 ≤ 50 ms",
                "the same schedule without the gripper (rows above)",
            )
        )
    return [
        *held,
        Row(
            "lerobot robot",
            "ticks per second, get_observation + send_action through the safe arm "
            "(sim daemon in real time)",
            f"{r['robot_tick_hz']} Hz ({r['robot_vs_raw']}× raw); with the top camera "
            f"{r.get('robot_tick_with_top_camera_hz')} Hz (its 10 fps)",
            "≥ 30 Hz",
            f"raw get_angles + send_angles {r['raw_read_send_hz']} Hz",
        ),
    ]
