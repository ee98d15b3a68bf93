"""The rig as a LeRobot-shaped robot (docs/lerobot-robot.md), driven synchronously as
lerobot drives it, against a real simulated daemon process (token, short idle timeout)
and its MJPEG top camera: every action bounded by the safe arm, the features lerobot
reads, a policy that thinks longer than the daemon's idle timeout."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import numpy as np
import pytest

from mecharm.common.config import load_settings
from mecharm.common.layout import TRACE_SUFFIX
from mecharm.runtime.client import DaemonClient
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.robot import (
    GRIPPER_KEY,
    JOINT_KEYS,
    CameraSpec,
    MecharmRobot,
    RobotError,
    RobotNotConnected,
    parse_action,
)
from mecharm.runtime.simcontrol import scene_truth
from mecharm.tools.simrig import SimRig, start_sim_daemon

TOKEN = "robot-test-token-0123456789abcdef"
IDLE_S = 2.0  # the daemon drops a client silent this long; the robot's pings keep it
STEP = 4.0


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimRig]:
    sim = start_sim_daemon(
        tmp_path_factory.mktemp("robot") / "logs", time_scale=20, token=TOKEN,
        extra_args=["--idle-timeout", str(IDLE_S)],
    )  # fmt: skip
    try:
        yield sim
    finally:
        sim.daemon.stop()


def _settings(rig: SimRig, tmp_path: Path, **more: object) -> RuntimeSettings:
    return load_settings(
        RuntimeSettings,
        overrides={
            "data_root": tmp_path,
            "daemon.port": rig.daemon_port,
            "daemon.token_file": rig.token_file,
            **more,
        },
    )


@pytest.fixture
def robot(rig: SimRig, tmp_path: Path) -> Iterator[MecharmRobot]:
    r = MecharmRobot(
        _settings(rig, tmp_path),
        cameras={"top": CameraSpec(rig.top_url, 640, 360)},
        max_step_deg=STEP,
        trace_path=tmp_path / f"robot{TRACE_SUFFIX}",
    )
    r.connect()
    try:
        yield r
    finally:
        r.disconnect()


def test_features_are_named_like_lerobot_s_arms() -> None:
    r = MecharmRobot(RuntimeSettings(), cameras={"top": CameraSpec("0", 640, 360)})
    assert list(r.action_features) == [*JOINT_KEYS, GRIPPER_KEY]
    assert JOINT_KEYS == ("j0.pos", "j1.pos", "j2.pos", "j3.pos", "j4.pos", "j5.pos")
    assert r.observation_features["top"] == (360, 640, 3)
    assert not r.is_connected
    with pytest.raises(RobotNotConnected, match="connect"):
        r.get_observation()
    with pytest.raises(ValueError, match="camera names"):
        MecharmRobot(RuntimeSettings(), cameras={"j0.pos": CameraSpec("0", 640, 360)})
    with pytest.raises(ValueError, match="width"):
        CameraSpec("0", 5, 360)
    for bad in (0.0, -1.0, 45.0, math.nan):
        with pytest.raises(ValueError, match="max_step_deg"):
            MecharmRobot(RuntimeSettings(), max_step_deg=bad)


@pytest.mark.parametrize(
    ("action", "needle"),
    [
        ({k: 0.0 for k in JOINT_KEYS[:5]}, "lacks ['j5.pos']"),
        ({**dict.fromkeys(JOINT_KEYS, 0.0), "j6.pos": 1.0}, "does not know: ['j6.pos']"),
        ({**dict.fromkeys(JOINT_KEYS, 0.0), "j2.pos": math.nan}, "j2.pos = nan is not a finite"),
        ({**dict.fromkeys(JOINT_KEYS, 0.0), "j3.pos": "left"}, "j3.pos = 'left' is not a number"),
        ({**dict.fromkeys(JOINT_KEYS, 0.0), GRIPPER_KEY: 140}, "gripper.pos 140: give 0"),
    ],
)
def test_a_malformed_action_is_refused_before_anything_is_sent(action: dict, needle: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_action(action)
    assert needle in str(err.value)


def test_numpy_scalars_are_actions_too() -> None:
    joints, grip = parse_action({**{k: np.float32(1.5) for k in JOINT_KEYS}, GRIPPER_KEY: 99.6})
    assert joints == (1.5,) * 6 and grip == 100


@pytest.mark.slow
def test_observe_and_act_through_the_safe_arm(robot: MecharmRobot, tmp_path: Path) -> None:
    obs = robot.get_observation()
    assert set(obs) == {*JOINT_KEYS, GRIPPER_KEY, "top"}
    assert obs["top"].shape == (360, 640, 3) and obs["top"].dtype == np.uint8
    now = [obs[k] for k in JOINT_KEYS]
    assert all(math.isfinite(v) for v in now)
    # a far target (j0 30° away, j1 and j2 20°): each joint moves at most STEP from the
    # present reading
    goal = (now[0] + 30.0 if now[0] < 60 else now[0] - 30.0, 20.0, -20.0, *now[3:])
    want = dict(zip(JOINT_KEYS, goal, strict=True))
    sent = robot.send_action(want)
    for k, before in zip(JOINT_KEYS, now, strict=True):
        assert abs(sent[k] - before) <= STEP + 0.011, (k, sent[k], before)
    assert abs(sent["j0.pos"] - now[0]) > STEP - 0.5  # it did move toward the target
    # streaming the same target reaches it, one bounded step per call
    for _ in range(15):
        sent = robot.send_action(want)
        time.sleep(0.02)
    time.sleep(0.5)
    obs = robot.get_observation()
    assert abs(obs["j0.pos"] - goal[0]) < 3.0, (obs["j0.pos"], goal)
    trace = (tmp_path / f"robot{TRACE_SUFFIX}").read_text()
    assert trace.count('"stream_step"') == 16  # every action is in the trace


@pytest.mark.slow
def test_an_unsafe_action_is_held_and_the_returned_action_says_so(robot: MecharmRobot) -> None:
    obs = robot.get_observation()
    here = [obs[k] for k in JOINT_KEYS]
    # j1 past the rig's limit (88°), from near it: the step bound does not save it
    for _ in range(40):
        sent = robot.send_action(dict(zip(JOINT_KEYS, (0, 120.0, 0, 0, 0, -30), strict=True)))
        if sent["j1.pos"] == pytest.approx(here[1], abs=0.5) and _ > 0:
            break
        here = [sent[k] for k in JOINT_KEYS]
    obs = robot.get_observation()
    assert obs["j1.pos"] <= robot.settings.arm.j1_max + 0.5, obs["j1.pos"]
    held = robot.send_action(dict(zip(JOINT_KEYS, (0, 120.0, 0, 0, 0, -30), strict=True)))
    assert held["j1.pos"] <= robot.settings.arm.j1_max + 0.5


@pytest.mark.slow
def test_a_policy_thinking_longer_than_the_idle_timeout_keeps_the_daemon(
    robot: MecharmRobot,
) -> None:
    robot.get_observation()
    time.sleep(IDLE_S * 2.5)  # an inference this long, in lerobot's thread
    obs = robot.get_observation()  # without the pings: ConnectionLost
    assert set(JOINT_KEYS) <= set(obs)
    assert robot._link.client.pings >= 2


@pytest.mark.slow
def test_a_wrong_token_is_a_one_line_refusal(rig: SimRig, tmp_path: Path) -> None:
    bad = tmp_path / "other.token"
    bad.write_text("not-the-token-at-all-0123456789\n")
    bad.chmod(0o600)
    r = MecharmRobot(_settings(rig, tmp_path, **{"daemon.token_file": bad}))
    with pytest.raises(RobotError, match="token"):
        r.connect()
    assert not r.is_connected
    r.disconnect()  # after a failed connect: nothing left open, no error


@pytest.mark.slow
def test_a_daemon_killed_mid_session_is_a_clear_error_and_disconnect_still_works(
    tmp_path: Path,
) -> None:
    sim = start_sim_daemon(tmp_path / "logs", time_scale=20, scene=None)
    try:
        r = MecharmRobot(
            load_settings(
                RuntimeSettings,
                overrides={"data_root": tmp_path, "daemon.port": sim.daemon_port},
            )
        )
        r.connect()
        r.get_observation()
        sim.daemon.proc.kill()  # kill -9: no goodbye on the connection
        sim.daemon.proc.wait()
        with pytest.raises(RobotError, match=r"did not answer.*connect\(\) again"):
            for _ in range(3):  # the first read may still be answered from the socket
                r.send_action(dict(zip(JOINT_KEYS, (0.0,) * 6, strict=True)))
        with pytest.raises(RobotNotConnected):
            r.get_observation()
        r.disconnect()
        assert not r.is_connected
    finally:
        sim.daemon.stop()


def test_a_gripper_command_holding_the_link_does_not_hold_the_caller(tmp_path: Path) -> None:
    """The rig profile's gripper call holds the daemon 4 s (2 s at time scale 2): lerobot's
    calls go on meanwhile (the joints as last read, the action held, not sent), and
    ``disconnect()`` waits for the command, then puts back the fresh mode it found."""
    sim = start_sim_daemon(
        tmp_path / "logs", time_scale=2, token=TOKEN, extra_args=["--sim-profile", "rig"]
    )
    try:
        r = MecharmRobot(
            _settings(sim, tmp_path), max_step_deg=STEP, trace_path=tmp_path / f"r{TRACE_SUFFIX}"
        )
        r.connect()
        try:
            before = r.get_observation()
            here = {k: before[k] for k in JOINT_KEYS}
            sent = r.send_action({**here, GRIPPER_KEY: 0.0})
            assert sent[GRIPPER_KEY] == 0.0  # the value sent; the command is under way
            during = r.get_observation()  # the link is held: the last reading again
            assert [during[k] for k in JOINT_KEYS] == [before[k] for k in JOINT_KEYS]
            assert during[GRIPPER_KEY] == 0.0
            away = {**here, "j0.pos": here["j0.pos"] + 2.0}
            held = r.send_action(away)  # not sent while the gripper command holds the link
            assert [held[k] for k in JOINT_KEYS] == [before[k] for k in JOINT_KEYS]
        finally:
            r.disconnect()  # waits for the gripper command
        lines = (tmp_path / f"r{TRACE_SUFFIX}").read_text()
        assert lines.count('"stream_step"') == 1 and lines.count('"gripper_done"') == 1
        assert scene_truth(sim.control_url)["gripper"] == pytest.approx(0.0, abs=1.0)

        async def fresh_mode() -> object:
            c = DaemonClient("127.0.0.1", sim.daemon_port, token=TOKEN)
            await c.connect()
            try:
                return await c.request("get_fresh_mode")
            finally:
                await c.aclose()

        assert anyio.run(fresh_mode) == 0  # put back after the command ended (the arm's default)
    finally:
        sim.daemon.stop()
