"""What the daemon's safety envelope costs per ``send_angles`` (docs/daemon.md, "Safety envelope").

The limit check itself (``Envelope.violation``), and ``send_angles`` round trips from a raw
client with the per-move bound off and on (it reads the arm before each send): against the
sim without latency, the sim in real time with its configured read/write latency, and the
mycobot backend over the serial firmware emulator (real pymycobot, ~18 ms per read).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import timeit
from collections.abc import Callable
from typing import Any

from bench import Row, has
from mecharm.common.envelope import Envelope
from mecharm.common.logging import configure_logging
from mecharm.daemon.backends.base import ArmBackend
from mecharm.daemon.backends.mycobot import MyCobotBackend
from mecharm.daemon.backends.sim import SimBackend
from mecharm.daemon.server import run_server
from mecharm.sim.arm import SimArm, SimArmConfig
from mecharm.sim.firmware import FirmwareEmulator

_START = (0.0, 10.0, 0.0, 0.0, 0.0, -30.0)


async def _sends(port: int, n: int) -> list[float]:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    out = []
    for i in range(n):
        pose = [float(i % 2), *_START[1:]]  # 1° steps: always within the bound
        line = {"id": i + 1, "cmd": "send_angles", "args": {"angles": pose, "speed": 50}}
        t0 = time.perf_counter()
        w.write(json.dumps(line).encode() + b"\n")
        resp = json.loads(await r.readline())
        out.append(time.perf_counter() - t0)
        if not resp["ok"]:
            raise RuntimeError(f"send_angles refused: {resp}")
    w.close()
    return out


def _sim(read_s: float, write_s: float, scale: float) -> Callable[[], tuple[ArmBackend, Any]]:
    def make() -> tuple[ArmBackend, Any]:
        cfg = SimArmConfig(
            time_scale=scale,
            seed=1,
            read_latency_s=read_s,
            write_latency_s=write_s,
            initial_angles=_START,
        )
        return SimBackend(SimArm(cfg)), None

    return make


def _emulated() -> tuple[ArmBackend, Any]:
    cfg = SimArmConfig(
        time_scale=50.0,
        seed=5,
        read_latency_s=0.0,
        write_latency_s=0.0,
        no_reply_s=0.0,
        initial_angles=_START,
    )
    emu = FirmwareEmulator(SimArm(cfg))  # default reply delays: the firmware's
    emu.start()
    return MyCobotBackend(emu.path, 1_000_000), emu


async def _rows(n: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    backends = {
        "sim_no_latency": _sim(0.0, 0.0, 50.0),
        "sim_real_time_read20ms_write5ms": _sim(0.020, 0.005, 1.0),
        "mycobot_firmware_emulator": _emulated,
    }
    for label, make in backends.items():
        for step in (None, 30.0):
            backend, emu = make()
            try:
                env = Envelope(max_step_deg=step)
                async with run_server(backend, "127.0.0.1", 0, envelope=env) as srv:
                    lat = sorted(await _sends(srv.port, n))
            finally:
                if emu is not None:
                    emu.close()
            key = f"{label}_step_{'off' if step is None else 'on'}"
            out[f"{key}_p50_ms"] = round(statistics.median(lat) * 1000, 2)
            out[f"{key}_p90_ms"] = round(lat[int(0.9 * len(lat))] * 1000, 2)
    return out


def run(quick: bool = False) -> dict[str, Any]:
    configure_logging("warning")
    n = 50 if quick else 200
    env, pose = Envelope(), list(_START)
    per = min(timeit.repeat(lambda: env.violation(pose), number=100_000, repeat=5)) / 100_000
    result: dict[str, Any] = {"violation_check_us": round(per * 1e6, 2), "sends": n}
    result.update(asyncio.run(_rows(n)))
    return result


def rows(result: dict[str, Any]) -> list[Row]:
    """The table's lines: the limit check, and ``send_angles`` with the per-move bound on vs off."""
    r, out = result, []
    if has(r, "violation_check_us"):
        out.append(
            Row(
                "daemon envelope", "limit check per send", f"{r['violation_check_us']} µs", "—", "—"
            )
        )
    for key, label in (
        ("mycobot_firmware_emulator", "mycobot over the firmware emulator"),
        ("sim_real_time_read20ms_write5ms", "sim arm in real time (read 20 ms, write 5 ms)"),
    ):
        on, off = f"{key}_step_on_p50_ms", f"{key}_step_off_p50_ms"
        if has(r, on, off):
            out.append(
                Row(
                    "daemon envelope",
                    f"`send_angles` with the per-move bound on, {label}",
                    f"p50 {r[on]} ms (+{r[on] - r[off]:.1f} ms per send; the bound is off by default)",
                    "—",
                    f"bound off p50 {r[off]} ms",
                )
            )
    return out
