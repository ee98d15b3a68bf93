"""The mycobot backend reopens a lost serial link (docs/daemon.md, "Serial link recovery"):
real pymycobot against the pty firmware emulator, which goes away and comes back at the
same (udev-like symlink) path."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from mecharm.daemon.backends.base import ArmSerialError, ArmUnavailableError
from mecharm.daemon.backends.mycobot import MyCobotBackend
from mecharm.daemon.server import run_server
from mecharm.sim.arm import SimArm, SimArmConfig
from mecharm.sim.firmware import FirmwareEmulator

from .conftest import LineClient


@pytest.fixture
def linked(tmp_path: Path) -> Iterator[FirmwareEmulator]:
    arm = SimArm(
        SimArmConfig(
            time_scale=50.0, seed=5, read_latency_s=0.0, write_latency_s=0.0, no_reply_s=0.0
        )
    )
    emu = FirmwareEmulator(
        arm, read_reply_s=0.002, write_reply_s=0.001, link=tmp_path / "ttyMECHARM"
    )
    emu.start()
    yield emu
    emu.close()


def test_emulator_restarts_at_the_same_link_with_the_same_arm(linked: FirmwareEmulator) -> None:
    assert linked.link is not None
    first = linked.path
    assert os.path.realpath(linked.link) == first
    linked.arm.send_angles([10.0, 0, 0, 0, 0, 0], 100)
    assert linked.arm.wait_idle(5)
    linked.close()
    assert not os.path.lexists(linked.link)  # unplugged: the device path is gone
    assert linked.restart() == linked.link
    assert os.path.realpath(linked.link) == linked.path and linked.starts == 2
    assert abs(linked.arm.true_angles()[0] - 10.0) < 2  # the arm kept its pose


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_backend_schedule_unavailable_meanwhile_and_reopen(linked: FirmwareEmulator) -> None:
    clock = FakeClock()
    assert linked.link is not None
    b = MyCobotBackend(
        linked.link,
        1000000,
        reopen_backoff_s=0.5,
        reopen_backoff_max_s=2.0,
        reopen_attempts=3,
        clock=clock,
    )
    b.open()
    try:
        assert len(b.get_angles()) == 6 and b.reopen_in() is None
        linked.close()
        with capture_logs() as logs:
            with pytest.raises(ArmSerialError, match="serial error"):
                b.get_angles()
            assert b.reopen_in() == 0.5
            with pytest.raises(ArmUnavailableError, match=r"reopening it \(0 of 3 .*next in 0.5 s"):
                b.send_angles([0, 0, 0, 0, 0, 0], 20)
            clock.t += 0.5
            assert b.reopen() is False  # still unplugged
            assert b.reopen_in() == 1.0  # doubled
            clock.t += 1.0
            assert b.reopen() is False
            assert b.reopen_in() == 2.0  # capped
            clock.t += 2.0
            assert b.reopen() is False
            assert b.reopen_in() is None  # scheduled attempts used up
            with pytest.raises(ArmUnavailableError, match="3 attempts to reopen it failed"):
                b.get_angles()  # not due yet: no attempt
            linked.start()
            clock.t += 2.0  # due: the command itself makes one attempt, succeeds, is served
            assert len(b.get_angles()) == 6
        events = [e["event"] for e in logs]
        assert events.count("serial_link_lost") == 1
        assert events.count("serial_reopen_failed") == 3
        assert events.count("serial_reopen_gave_up") == 1
        assert events.count("serial_reopened") == 1
        assert b.capabilities()["serial_link_up"] is True
    finally:
        b.close()
    assert b.reopen_in() is None and b.reopen() is False  # closed on purpose: no attempts


@pytest.mark.anyio
async def test_daemon_reopens_the_link_when_the_device_comes_back(
    linked: FirmwareEmulator,
) -> None:
    assert linked.link is not None
    backend = MyCobotBackend(
        linked.link, 1000000, reopen_backoff_s=0.05, reopen_backoff_max_s=0.2, reopen_attempts=200
    )
    async with run_server(backend, "127.0.0.1", 0, idle_timeout_s=0) as srv:
        c = await LineClient.connect(srv.port)
        assert len(await c.ok("get_angles")) == 6
        with capture_logs() as logs:
            linked.close()  # unplugged mid-session
            assert (await c.call("get_angles"))["error"]["code"] == "serial_error"
            codes = []
            for _ in range(10):  # while unplugged: arm_unavailable, never a reading
                resp = await c.call("get_angles")
                assert resp["ok"] is False, resp
                codes.append(resp["error"]["code"])
                await asyncio.sleep(0.05)
            assert set(codes) == {"arm_unavailable"}
            assert "nothing was sent" in resp["error"]["message"]
            linked.start()  # plugged back in: a new pty behind the same path
            deadline = time.monotonic() + 20
            while not (resp := await c.call("get_angles"))["ok"]:
                assert resp["error"]["code"] == "arm_unavailable", resp
                assert time.monotonic() < deadline, "the link never came back"
                await asyncio.sleep(0.05)
        assert len(resp["result"]) == 6
        target = [15.0, 0.0, 0.0, 0.0, 0.0, -30.0]
        assert (await c.ok("send_angles", {"angles": target, "speed": 100}))["angles"] == target
        assert linked.arm.wait_idle(5)
        assert abs(linked.arm.true_angles()[0] - 15.0) < 2.7  # commands reach the new pty
        events = [e["event"] for e in logs]
        assert "serial_link_lost" in events and events.count("serial_reopened") == 1
        assert events.count("serial_reopen_failed") >= 1
        stats = await c.ok("stats")
        assert stats["errors"]["serial_error"] == 1 and "internal" not in stats["errors"]
        await c.close()
