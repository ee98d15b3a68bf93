"""The daemon process killed or frozen under the runtime's client, and the serial link
unplugged under the daemon: a clear error within the request timeout, never a hang,
never a made-up reading (docs/daemon.md, "Client slot", "Serial link recovery")."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from mecharm.common.config import load_settings
from mecharm.daemon.backends.mycobot import MyCobotBackend
from mecharm.daemon.server import run_server
from mecharm.runtime.client import ArmNoReply, ConnectionLost, DaemonClient, DaemonTimeout
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.rigsetup import open_rig
from mecharm.runtime.simcontrol import scene_next
from mecharm.runtime.trial import run_trial
from mecharm.sim.arm import SimArm, SimArmConfig
from mecharm.sim.firmware import FirmwareEmulator
from mecharm.tools.simrig import SimRig, start_sim_daemon

REQUEST_TIMEOUT_S = 1.5
#: never-hang guard around each fault: the request timeout plus room for a loaded machine
GUARD_S = REQUEST_TIMEOUT_S + 10.0
MOVE = [60.0, 30.0, 0.0, 0.0, 0.0, -30.0]  # at speed 5 in real time: a move of many seconds


@pytest.fixture
def arm_daemon(tmp_path: Path) -> Iterator[SimRig]:
    """The sim daemon alone, in real time (a move lasts), idle timeout 1 s."""
    rig = start_sim_daemon(
        tmp_path / "logs", scene=None, time_scale=1.0, extra_args=["--idle-timeout", "1"]
    )
    yield rig
    if rig.daemon.alive():
        os.kill(rig.daemon.proc.pid, signal.SIGCONT)  # a stopped daemon cannot take SIGINT
    rig.daemon.stop(5)


async def _moving_client(rig: SimRig) -> DaemonClient:
    client = DaemonClient("127.0.0.1", rig.daemon_port, request_timeout=REQUEST_TIMEOUT_S)
    await client.connect()
    await client.set_fresh_mode(1)
    await client.send_angles(MOVE, 5)
    assert await client.is_moving()
    return client


async def _poll_until_error(client: DaemonClient) -> tuple[Exception, float]:
    """Poll get_angles as the motion policy does; the error and when it came."""
    with anyio.fail_after(GUARD_S):
        while True:
            try:
                await client.get_angles()
            except (ConnectionLost, DaemonTimeout) as exc:
                return exc, time.monotonic()
            await anyio.sleep(0.02)


@pytest.mark.anyio
async def test_sigkill_mid_move_is_connection_lost_at_once(arm_daemon: SimRig) -> None:
    client = await _moving_client(arm_daemon)
    try:
        await anyio.sleep(0.3)
        t_kill = time.monotonic()
        arm_daemon.daemon.proc.send_signal(signal.SIGKILL)
        exc, t_err = await _poll_until_error(client)
        assert isinstance(exc, ConnectionLost), exc
        assert "closed the connection" in str(exc) or "lost" in str(exc), exc
        assert t_err - t_kill <= REQUEST_TIMEOUT_S
        with pytest.raises(ConnectionLost):  # stays lost: no silent reconnect
            await client.get_angles()
    finally:
        await client.aclose()


@pytest.mark.anyio
async def test_sigstop_mid_move_is_a_timeout_then_the_daemon_serves_again(
    arm_daemon: SimRig,
) -> None:
    client = await _moving_client(arm_daemon)
    pid = arm_daemon.daemon.proc.pid
    try:
        await anyio.sleep(0.3)
        t_stop = time.monotonic()
        os.kill(pid, signal.SIGSTOP)
        exc, t_err = await _poll_until_error(client)
        assert isinstance(exc, DaemonTimeout) and "get_angles" in str(exc), exc
        waited = t_err - t_stop
        assert waited >= REQUEST_TIMEOUT_S * 0.9
        print(f"SIGSTOP: DaemonTimeout {waited:.2f} s after the stop (timeout {REQUEST_TIMEOUT_S})")
        with pytest.raises(ConnectionLost, match="no reply"):  # its state is unknown: closed
            await client.get_angles()
    finally:
        os.kill(pid, signal.SIGCONT)
        await client.aclose()
    # the daemon, thawed, saw the client go and serves the next one
    fresh = DaemonClient("127.0.0.1", arm_daemon.daemon_port, busy_wait_s=5.0)
    with anyio.fail_after(GUARD_S):
        await fresh.connect()
        assert len(await fresh.get_angles()) == 6
    await fresh.aclose()


@pytest.mark.anyio
async def test_sigstop_while_idle_the_keepalive_finds_out(arm_daemon: SimRig) -> None:
    client = DaemonClient("127.0.0.1", arm_daemon.daemon_port, request_timeout=REQUEST_TIMEOUT_S)
    await client.connect()
    pid = arm_daemon.daemon.proc.pid
    try:
        async with client.keepalive():  # between trials: only pings on the wire
            os.kill(pid, signal.SIGSTOP)
            with anyio.fail_after(GUARD_S):
                while client.is_connected:
                    await anyio.sleep(0.05)
            with pytest.raises(ConnectionLost, match="no reply to ping"):
                await client.get_angles()  # at once: the connection is known to be gone
    finally:
        os.kill(pid, signal.SIGCONT)
        await client.aclose()


@pytest.mark.anyio
async def test_serial_unplugged_mid_move_then_back_no_reading_is_made_up(
    tmp_path: Path,
) -> None:
    arm = SimArm(
        SimArmConfig(time_scale=5.0, seed=2, read_latency_s=0.0, write_latency_s=0.0, no_reply_s=0)
    )
    emu = FirmwareEmulator(arm, link=tmp_path / "ttyMECHARM")
    link = emu.start()
    backend = MyCobotBackend(link, 1_000_000, reopen_backoff_s=0.1, reopen_backoff_max_s=0.4)
    try:
        async with run_server(backend, "127.0.0.1", 0) as srv:
            client = DaemonClient("127.0.0.1", srv.port, request_timeout=5.0)
            await client.connect()
            await client.send_angles(MOVE, 20)
            readings: list[Any] = [await client.get_angles()]
            emu.close()  # unplugged mid-move
            errors: list[str] = []
            t_gone = time.monotonic()
            while time.monotonic() - t_gone < 1.5:
                try:
                    readings.append(await client.get_angles())
                except ArmNoReply as exc:
                    errors.append(exc.code)
                await anyio.sleep(0.05)
            assert len(readings) == 1, "a reading while unplugged was made up"
            assert errors[0] == "serial_error" and set(errors[1:]) == {"arm_unavailable"}
            emu.start()  # plugged back in at the same path
            t_back = time.monotonic()
            with anyio.fail_after(GUARD_S):
                while True:
                    try:
                        angles = await client.get_angles()
                        break
                    except ArmNoReply as exc:
                        assert exc.code == "arm_unavailable"
                        await anyio.sleep(0.02)
            back = time.monotonic() - t_back
            assert max(abs(a - b) for a, b in zip(angles, arm.true_angles(), strict=True)) < 1.0
            assert client.is_connected  # the TCP session lived through the outage
            rec = backend.recoveries[-1]
            print(f"serial: served {back:.2f} s after the replug, {rec['attempts']:.0f} attempts")
            await client.aclose()
    finally:
        emu.close()


@pytest.mark.anyio
async def test_sigstop_mid_trial_stops_the_trial_naming_the_daemon(
    tmp_path: Path, fk_data_dir: Path
) -> None:
    rig = start_sim_daemon(tmp_path / "logs", seed=7, time_scale=20.0)
    root = tmp_path / "root"
    root.mkdir()
    settings = load_settings(
        RuntimeSettings,
        overrides={
            "data_root": root,
            "fk_data_dir": fk_data_dir,
            "daemon_port": rig.daemon_port,
            "top_camera": rig.top_url,
            "recorder_enabled": False,
            "time_scale": 20.0,
            "request_timeout_s": REQUEST_TIMEOUT_S,
        },
    )
    pid = rig.daemon.proc.pid
    frozen: list[float] = []

    def on_stage(stage: str, outcome: str, reason: str) -> None:
        if stage == "grasp" and not frozen:  # the lift is next: freeze the daemon under it
            os.kill(pid, signal.SIGSTOP)
            frozen.append(time.monotonic())

    try:
        scene_next(rig.control_url, 7)
        with anyio.fail_after(120):
            async with open_rig(settings) as (trial_rig, _client):
                summary = await run_trial(trial_rig, scene_seed=7, on_stage=on_stage)
        ended = time.monotonic()
    finally:
        os.kill(pid, signal.SIGCONT)
        rig.daemon.stop(5)
    assert frozen, "the trial never reached grasp"
    assert summary.status == "stopped", summary.reason
    assert "daemon timeout" in summary.reason, summary.reason
    print(f"trial stopped {ended - frozen[0]:.2f} s after SIGSTOP: {summary.reason}")
