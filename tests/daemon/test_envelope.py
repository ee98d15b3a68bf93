"""The daemon's safety envelope: every client's send_angles outside it is refused with
``outside_envelope`` naming the joint, and nothing reaches the arm (docs/daemon.md,
"Safety envelope"). Real daemons on 127.0.0.1, raw TCP clients, the sim arm and the
serial firmware emulator."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from mecharm.common.envelope import Envelope, RuntimeLimits, wider_than_envelope
from mecharm.common.kinematics import JOINT_MAX, JOINT_MIN
from mecharm.daemon import cli
from mecharm.daemon.backends.mycobot import MyCobotBackend
from mecharm.daemon.backends.sim import SimBackend
from mecharm.daemon.server import ArmServer, run_server
from mecharm.sim.arm import HOME, SimArm
from mecharm.sim.firmware import SEND_ANGLES, FirmwareEmulator

from .conftest import LineClient
from .test_cli import Daemon

#: 10° inside the SDK limits on both sides of every joint (j1's top: 80)
NARROW = Envelope(
    tuple(lo + 10 for lo in JOINT_MIN),
    (150.0, 80.0, 55.0, 145.0, 105.0, 170.0),
)
HOME_POSE = list(HOME)


@pytest.fixture
async def narrow(sim_arm: SimArm) -> AsyncIterator[tuple[ArmServer, LineClient]]:
    async with run_server(SimBackend(sim_arm), "127.0.0.1", 0, envelope=NARROW) as srv:
        c = await LineClient.connect(srv.port)
        yield srv, c
        await c.close()


def _pose(joint: int, value: float) -> list[float]:
    pose = list(HOME_POSE)
    pose[joint] = value
    return pose


async def _refused(c: LineClient, angles: list[float]) -> dict[str, Any]:
    resp = await c.call("send_angles", {"angles": angles, "speed": 50})
    assert resp["ok"] is False, resp
    assert resp["error"]["code"] == "outside_envelope", resp
    return resp["error"]  # type: ignore[no-any-return]


# ------------------------------------------------------------ the default envelope


@pytest.mark.anyio
async def test_j1_90_5_is_refused_and_the_arm_does_not_move(
    client: LineClient, sim_arm: SimArm
) -> None:
    hello = await client.ok("hello")
    assert hello["envelope"]["joint_max"][1] == 88.0  # the default
    before = await client.ok("get_angles")
    true_before, sends = sim_arm.true_angles(), sim_arm.counters["sends"]
    err = await _refused(client, [0.0, 90.5, 0.0, 0.0, 0.0, -30.0])
    assert "j1 = 90.50" in err["message"] and "maximum 88" in err["message"]
    await asyncio.sleep(0.05)
    assert sim_arm.counters["sends"] == sends  # nothing reached the backend
    assert sim_arm.true_angles() == true_before
    after = await client.ok("get_angles")
    assert max(abs(a - b) for a, b in zip(after, before, strict=True)) < 0.5
    assert await client.ok("is_moving") is False
    # at the limit it goes through
    sent = await client.ok(
        "send_angles", {"angles": [0.0, 88.0, 0.0, 0.0, 0.0, -30.0], "speed": 50}
    )
    assert sent["angles"][1] == 88.0 and sim_arm.counters["sends"] == sends + 1
    stats = await client.ok("stats")
    assert stats["errors"] == {"outside_envelope": 1}


# ------------------------------------------------------------ every joint, both sides


@pytest.mark.anyio
@pytest.mark.parametrize("joint", range(6))
@pytest.mark.parametrize("side", ["min", "max"])
async def test_each_joint_just_outside_is_refused_naming_it(
    narrow: tuple[ArmServer, LineClient], sim_arm: SimArm, joint: int, side: str
) -> None:
    _, c = narrow
    limit = NARROW.joint_min[joint] if side == "min" else NARROW.joint_max[joint]
    outside = limit - 0.01 if side == "min" else limit + 0.01
    sends = sim_arm.counters["sends"]
    before = sim_arm.true_angles()
    err = await _refused(c, _pose(joint, outside))
    word = "minimum" if side == "min" else "maximum"
    assert re.search(
        rf"\bj{joint} = {outside:.2f} is (below|above) the envelope's {word} {limit:g}°",
        err["message"],
    ), err
    assert sim_arm.counters["sends"] == sends and sim_arm.true_angles() == before
    # just inside (and at the limit itself) passes
    inside = limit + 0.01 if side == "min" else limit - 0.01
    await c.ok("send_angles", {"angles": _pose(joint, inside), "speed": 100})
    await c.ok("send_angles", {"angles": _pose(joint, limit), "speed": 100})
    assert sim_arm.counters["sends"] == sends + 2


@pytest.mark.anyio
async def test_outside_the_sdk_limits_stays_angle_out_of_range(
    narrow: tuple[ArmServer, LineClient],
) -> None:
    _, c = narrow
    resp = await c.call("send_angles", {"angles": _pose(1, 121.0), "speed": 50})
    assert resp["error"]["code"] == "angle_out_of_range"


# ------------------------------------------------------------ the firmware saw nothing


@pytest.mark.anyio
async def test_the_firmware_sees_no_send_angles_frame(emulator: FirmwareEmulator) -> None:
    """mycobot backend over the serial emulator: the refused send never becomes a frame."""
    seen: list[int] = []
    handle = emulator._handle

    def counting(master: int, cmd: int, data: bytes) -> None:
        seen.append(cmd)
        handle(master, cmd, data)

    emulator._handle = counting  # type: ignore[method-assign]
    async with run_server(MyCobotBackend(emulator.path, 1000000), "127.0.0.1", 0) as srv:
        c = await LineClient.connect(srv.port)
        before = await c.ok("get_angles")
        err = await _refused(c, [0.0, 90.5, 0.0, 0.0, 0.0, -30.0])
        assert err["message"].startswith("send_angles refused, the arm does not move: j1 = 90.50")
        after = await c.ok("get_angles")
        assert SEND_ANGLES not in seen and emulator.arm.counters["sends"] == 0
        assert max(abs(a - b) for a, b in zip(after, before, strict=True)) < 0.5
        await c.ok("send_angles", {"angles": [0.0, 87.9, 0.0, 0.0, 0.0, -30.0], "speed": 80})
        assert seen.count(SEND_ANGLES) == 1
        await c.close()


@pytest.mark.anyio
async def test_daemon_process_refuses_per_its_config(tmp_path: Path) -> None:
    """The real ``mecharm-daemon`` process, its envelope from flags, a raw client."""
    d = Daemon(
        ["--backend", "sim", "--time-scale", "20", "--envelope-max", "150,80,55,145,105,170"],
        tmp_path,
    )
    try:
        c = await LineClient.connect(d.port)
        hello = await c.ok("hello")
        assert hello["envelope"]["joint_max"] == [150.0, 80.0, 55.0, 145.0, 105.0, 170.0]
        err = await _refused(c, _pose(1, 80.5))
        assert "j1 = 80.50" in err["message"]
        err = await _refused(c, _pose(0, 150.5))
        assert "j0 = 150.50" in err["message"]
        await c.close()
    finally:
        rc, events = d.terminate()
    assert rc == 0
    assert any(e["event"] == "request_rejected" and e["code"] == "outside_envelope" for e in events)


# ------------------------------------------------------------ hello


@pytest.mark.anyio
async def test_hello_envelope_round_trips(narrow: tuple[ArmServer, LineClient]) -> None:
    srv, c = narrow
    hello = await c.ok("hello")
    assert hello["envelope"] == NARROW.to_wire()
    assert Envelope.from_wire(hello["envelope"]) == NARROW == srv.envelope
    stepped = Envelope(NARROW.joint_min, NARROW.joint_max, 12.5)
    assert Envelope.from_wire(stepped.to_wire()) == stepped


@pytest.mark.parametrize(
    ("wire", "why"),
    [
        ([1, 2], "must be an object"),
        ({"joint_min": list(JOINT_MIN)}, "lacks 'joint_max'"),
        ({"joint_min": list(JOINT_MIN), "joint_max": list(JOINT_MAX), "x": 1}, "unknown fields"),
        ({"joint_min": list(JOINT_MIN), "joint_max": [0, 0, 0, 0, 0, "a"]}, r"joint_max\[5\]"),
    ],
)
def test_a_malformed_envelope_is_named(wire: Any, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        Envelope.from_wire(wire)


# ------------------------------------------------------------ the per-move bound


@pytest.mark.anyio
async def test_step_bound_refuses_a_jump_from_where_the_arm_is(sim_arm: SimArm) -> None:
    env = Envelope(JOINT_MIN, Envelope().joint_max, max_step_deg=10.0)
    async with run_server(SimBackend(sim_arm), "127.0.0.1", 0, envelope=env) as srv:
        c = await LineClient.connect(srv.port)
        now = await c.ok("get_angles")
        assert (await c.ok("hello"))["envelope"]["max_step_deg"] == 10.0
        sends, reads = sim_arm.counters["sends"], sim_arm.counters["reads"]
        err = await _refused(c, [now[0], now[1], now[2] + 25.0, now[3], now[4], now[5]])
        assert "j2 would move" in err["message"] and "per-move bound 10°" in err["message"]
        assert sim_arm.counters["sends"] == sends  # read, then refused: nothing sent
        assert sim_arm.counters["reads"] == reads + 1
        target = [now[0] + 8.0, *now[1:]]
        await c.ok("send_angles", {"angles": target, "speed": 100})
        assert sim_arm.counters["sends"] == sends + 1
        await c.close()


@pytest.mark.anyio
async def test_step_bound_holds_for_queued_sends(sim_arm: SimArm) -> None:
    """Queue mode (fresh mode 0): a send runs from the previous queued target, not from where
    the arm is, so back-to-back sends of ±8° each are each checked against both: the second,
    16° from the first target, is refused although the arm has not moved yet."""
    env = Envelope(JOINT_MIN, Envelope().joint_max, max_step_deg=10.0)
    async with run_server(SimBackend(sim_arm), "127.0.0.1", 0, envelope=env) as srv:
        c = await LineClient.connect(srv.port)
        await c.ok("set_fresh_mode", {"mode": 0})
        now = await c.ok("get_angles")
        sends = sim_arm.counters["sends"]
        await c.ok("send_angles", {"angles": [*now[:5], now[5] - 8.0], "speed": 100})
        err = await _refused(c, [*now[:5], now[5] + 8.0])
        # the larger of the two moves is named (16° from the queued target), however far the
        # arm got toward that target before this send arrived
        moved = re.search(r"j5 would move (\d+\.\d+)°", err["message"])
        assert moved is not None and float(moved.group(1)) >= 15.99, err
        assert sim_arm.counters["sends"] == sends + 1  # the second never reached the arm
        # after a stop the queue is gone: where the arm is is the only reference again
        await c.ok("stop")
        here = await c.ok("get_angles")
        await c.ok("send_angles", {"angles": [*here[:5], here[5] + 8.0], "speed": 100})
        await c.close()


# ------------------------------------------------------------ config errors: exit 2


@pytest.mark.parametrize(
    ("yaml_text", "needle"),
    [
        (
            "envelope:\n  joint_max: [160, 121, 65, 155, 115, 180]\n",
            "above the SDK limit 120 of j1",
        ),
        (
            "envelope:\n  joint_min: [-161, -75, -175, -155, -115, -180]\n",
            "below the SDK limit -160 of j0",
        ),
        (
            "envelope:\n  joint_min: [-160, 88, -175, -155, -115, -180]\n",
            "j1: joint_min 88 must be below joint_max 88",
        ),
        ("envelope:\n  joint_max: [160, eighty, 65, 155, 115, 180]\n", "envelope.joint_max.1"),
        ("envelope:\n  joint_max: [160, 88, 65]\n", "joint_max must have 6 values"),
        ("envelope:\n  max_step_deg: 0\n", "max_step_deg must be > 0"),
        ("envelope:\n  j1_max: 85\n", "envelope.j1_max: unknown key"),
    ],
)
def test_bad_envelope_config_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], yaml_text: str, needle: str
) -> None:
    cfg = tmp_path / "d.yaml"
    cfg.write_text(yaml_text)
    assert cli.main(["--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert needle in err and "mecharm-daemon" in err and "Traceback" not in err


# ------------------------------------------------------------ the comparison the runtime uses


def test_wider_than_envelope_names_each_problem() -> None:
    env = Envelope(JOINT_MIN, (80.0, 85.0, 65.0, 155.0, 115.0, 180.0), max_step_deg=20.0)
    fits = RuntimeLimits(j1_max=85.0, poses={"home": HOME_POSE}, joints={"swept_j0": (0, 80.0)})
    assert wider_than_envelope(fits, env) == []
    wide = RuntimeLimits(
        j1_max=88.0,
        poses={"home": [0, 86.0, 0, 0, 0, -30]},
        joints={"swept_j0": (0, 85.0)},
        joint_step_max_deg=30.0,
    )
    problems = wider_than_envelope(wide, env)
    assert len(problems) == 4
    assert "j1_max 88 is above the envelope's j1 maximum 85" in problems[0]
    assert problems[1].startswith("home") and "j1 = 86.00" in problems[1]
    assert "swept_j0 85 is outside the envelope's j0 limits [-160, 80]" in problems[2]
    assert "joint_step_max_deg 30 is above the envelope's per-move bound 20" in problems[3]
