"""The serial firmware emulator, real pymycobot against it, and the mycobot backend end to end."""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import struct
import subprocess
import sys
import time

import pytest
from pymycobot.mecharm270 import MechArm270

from mecharm.common.envelope import Envelope
from mecharm.common.kinematics import JOINT_MAX, JOINT_MIN
from mecharm.daemon.backends.mycobot import MyCobotBackend
from mecharm.daemon.server import run_server
from mecharm.sim.firmware import (
    GET_ANGLES,
    SEND_ANGLES,
    FirmwareEmulator,
    build_frame,
    parse_frames,
)

from .conftest import LineClient


def test_build_and_parse_frames() -> None:
    f = build_frame(GET_ANGLES)
    assert f == bytes([0xFE, 0xFE, 0x02, 0x20, 0xFA])
    data = struct.pack(">6h", 0, 8774, -3833, 1860, -4511, -3000) + bytes([20])
    g = build_frame(SEND_ANGLES, data)
    assert g[2] == len(data) + 2 and g[-1] == 0xFA
    buf = bytearray(b"\x00\x13garbage" + f + b"\xfe" + g[:7])
    assert parse_frames(buf) == [(GET_ANGLES, b"")]
    buf.extend(g[7:])  # the rest arrives later
    assert parse_frames(buf) == [(SEND_ANGLES, data)]
    assert buf == b""
    bad = bytearray(b"\xfe\xfe\x03\x20\x01\x00" + f)  # wrong footer, then a good frame
    assert parse_frames(bad) == [(GET_ANGLES, b"")]
    assert parse_frames(bytearray(b"\xfe\xfe\x00\x20\xfa")) == []


def test_pymycobot_unchanged_against_the_emulator(emulator: FirmwareEmulator) -> None:
    arm = emulator.arm
    mc = MechArm270(emulator.path, 1000000)
    try:
        angles = mc.get_angles()
        assert isinstance(angles, list) and len(angles) == 6
        assert max(abs(a - b) for a, b in zip(angles, arm.true_angles(), strict=True)) < 0.6
        assert mc.get_fresh_mode() == 0
        assert mc.set_fresh_mode(1) == 1
        assert mc.get_fresh_mode() == 1 and arm.get_fresh_mode() == 1
        target = [-31.93, 87.74, -38.33, 18.6, -45.11, -30.0]
        assert mc.send_angles(target, 5) == 1  # ~22 s arm time, ~0.4 s real at 50x
        assert mc.is_moving() == 1
        assert arm.wait_idle(5)
        assert mc.is_moving() == 0
        got = mc.get_angles()
        assert max(abs(a - b) for a, b in zip(got, target, strict=True)) < 2.7
        assert mc.set_gripper_value(20, 100, 1) == 1
        assert arm.wait_idle(5)
        assert mc.get_gripper_value() == 20
        assert mc.set_gripper_state(0, 50, 1) == 1
        assert arm.wait_idle(5)
        assert mc.get_gripper_value() == 100
        assert mc.stop() == 1
        assert mc.release_all_servos() == 1 and not arm.powered
        assert mc.power_on() == 1 and arm.powered
        assert mc.is_power_on() == 1
    finally:
        mc.close()


def test_reply_timing_matches_the_firmware() -> None:
    # like the real firmware: ~18 ms per read, always within the 500 ms pymycobot waits;
    # the defaults say so, and a reply never comes before its delay (a lower bound only:
    # a loaded machine may make it later, which is not the emulator's fault)
    defaults = inspect.signature(FirmwareEmulator).parameters
    assert defaults["read_reply_s"].default == 0.0175 and defaults["write_reply_s"].default < 0.5
    with FirmwareEmulator(read_reply_s=0.0175, write_reply_s=0.003) as emu:
        fd = os.open(emu.path, os.O_RDWR | os.O_NOCTTY)
        try:
            t0 = time.monotonic()
            os.write(fd, build_frame(GET_ANGLES))
            reply = b""
            while len(reply) < 16:
                reply += os.read(fd, 64)
            dt = time.monotonic() - t0
        finally:
            os.close(fd)
    assert reply[:4] == bytes([0xFE, 0xFE, 14, GET_ANGLES]) and reply[-1] == 0xFA
    assert dt >= 0.0175


@pytest.mark.anyio
async def test_every_command_through_the_daemon_on_the_mycobot_backend(
    emulator: FirmwareEmulator,
) -> None:
    arm = emulator.arm
    # an envelope as wide as the SDK's: the firmware's own silent rejection is under test here
    sdk_wide = Envelope(JOINT_MIN, JOINT_MAX)
    async with run_server(
        MyCobotBackend(emulator.path, 1000000), "127.0.0.1", 0, envelope=sdk_wide
    ) as srv:
        c = await LineClient.connect(srv.port)
        hello = await c.ok("hello")
        assert (
            hello["backend"] == "mycobot" and hello["capabilities"]["serial_port"] == emulator.path
        )
        assert len(await c.ok("get_angles")) == 6
        assert await c.ok("set_fresh_mode", {"mode": 1}) is None
        assert await c.ok("get_fresh_mode") == 1
        target = [20.0, 80.0, -10.0, 5.0, -20.0, -30.0]
        assert (await c.ok("send_angles", {"angles": target, "speed": 5}))["angles"] == target
        assert await c.ok("is_moving") is True
        assert arm.wait_idle(5)
        assert await c.ok("is_moving") is False
        got = await c.ok("get_angles")
        assert max(abs(a - b) for a, b in zip(got, target, strict=True)) < 2.7
        assert await c.ok("set_gripper_value", {"value": 20, "speed": 100}) is None
        assert arm.wait_idle(5)
        assert await c.ok("get_gripper_value") == 20
        assert await c.ok("set_gripper_state", {"state": 0, "speed": 100}) is None
        assert arm.wait_idle(5)
        assert await c.ok("get_gripper_value") == 100
        assert await c.ok("stop") is None
        assert await c.ok("release_all_servos") is None
        assert await c.ok("power_on") is None
        # the firmware's silent rejection reaches the daemon as a normal ack
        before = arm.true_angles()
        assert (await c.ok("send_angles", {"angles": [0.0, 95.0, 0, 0, 0, 0], "speed": 50}))[
            "speed"
        ] == 50
        await asyncio.sleep(0.1)
        assert arm.true_angles() == before
        stats = await c.ok("stats")
        assert stats["backend"] == "mycobot" and stats["errors"] == {}
        await c.close()


@pytest.mark.slow
@pytest.mark.anyio
async def test_no_reply_becomes_arm_no_reply(emulator: FirmwareEmulator) -> None:
    async with run_server(MyCobotBackend(emulator.path, 1000000), "127.0.0.1", 0) as srv:
        c = await LineClient.connect(srv.port)
        emulator.drop_replies(1)  # pymycobot retries after 0.5 s and gets the answer
        assert len(await c.ok("get_angles")) == 6
        emulator.drop_replies(3)  # all three tries unanswered: the SDK returns -1
        t0 = time.monotonic()
        resp = await c.call("get_angles")
        assert time.monotonic() - t0 >= 1.4
        assert resp["ok"] is False and resp["error"]["code"] == "arm_no_reply"
        assert "-1" in resp["error"]["message"]
        assert len(await c.ok("get_angles")) == 6  # recovered, connection still usable
        await c.close()


@pytest.mark.anyio
async def test_lost_serial_port_becomes_serial_error(emulator: FirmwareEmulator) -> None:
    async with run_server(MyCobotBackend(emulator.path, 1000000), "127.0.0.1", 0) as srv:
        c = await LineClient.connect(srv.port)
        assert len(await c.ok("get_angles")) == 6
        emulator.close()  # the device disappears
        resp = await c.call("get_angles")
        assert resp["ok"] is False and resp["error"]["code"] == "serial_error"
        resp = await c.call("hello")  # the daemon keeps serving
        assert resp["ok"] is True
        await c.close()


@pytest.mark.anyio
async def test_mycobot_backend_fails_to_start_on_a_missing_port(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from mecharm.daemon.backends.base import ArmSerialError

    with pytest.raises(ArmSerialError, match="cannot open serial port"):
        async with run_server(MyCobotBackend(str(tmp_path / "ttyNONE"), 1000000), "127.0.0.1", 0):
            pass


def test_mecharm_fake_arm_process() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "mecharm.sim.firmware", "--time-scale", "20"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        path = proc.stdout.readline().strip()
        assert path.startswith("/dev/")
        mc = MechArm270(path, 1000000)
        try:
            assert len(mc.get_angles()) == 6
            assert mc.send_angles([10.0, 0, 0, 0, 0, 0], 100) == 1
        finally:
            mc.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert "firmware_emulator_stopped" in err and "SIGTERM" in err
