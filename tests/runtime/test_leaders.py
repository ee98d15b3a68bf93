"""Leaders for teleoperation (docs/lerobot-robot.md, "Leaders"): a second arm moved by hand
through its own real simulated daemon, keys from a real pseudo-terminal, and a follower
that keeps every key's pose inside its guards."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mecharm.common.config import load_settings
from mecharm.common.kinematics import JOINT_MAX, JOINT_MIN, fk_tip
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.control import GRIPPER_KEY, JOINT_KEYS
from mecharm.runtime.leaders import KEYMAP, DragTeachLeader, KeyboardLeader, LeaderError
from mecharm.runtime.robot import MecharmRobot
from mecharm.tools.simrig import SimRig, start_sim_daemon

TOKEN = "leader-test-token-0123456789abcdef"
HOME = (0.0, 0.0, 0.0, 0.0, 0.0, -30.0)
#: above a block on the mat (ee_y ~87 mm), as the pick hover is
HOVER = (-35.5, 67.5, -42.87, 17.5, -10.98, -30.0)


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimRig]:
    sim = start_sim_daemon(tmp_path_factory.mktemp("leader") / "logs", time_scale=20, token=TOKEN)
    try:
        yield sim
    finally:
        sim.daemon.stop()


def _settings(rig: SimRig, tmp_path: Path) -> RuntimeSettings:
    return load_settings(
        RuntimeSettings,
        overrides={"data_root": tmp_path, "daemon.port": rig.daemon_port,
                   "daemon.token_file": rig.token_file},
    )  # fmt: skip


def _drag(rig: SimRig, angles: list[float]) -> tuple[int, dict[str, Any]]:
    """A hand moves the simulated leader arm (POST /arm/drag); (status, JSON answer)."""
    req = urllib.request.Request(
        rig.control_url + "/arm/drag",
        data=json.dumps({"angles": angles}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.slow
def test_a_drag_teach_leader_reads_the_arm_a_hand_moves_and_holds_it_after(
    rig: SimRig, tmp_path: Path
) -> None:
    pose = [20.0, 30.0, -20.0, 10.0, -15.0, -30.0]
    status, answer = _drag(rig, pose)
    assert status == 409 and "release them first" in answer["error"]  # powered: it holds
    leader = DragTeachLeader(_settings(rig, tmp_path))
    leader.connect()
    try:
        assert leader.is_connected
        status, _ = _drag(rig, pose)
        assert status == 200
        action = leader.get_action()
        assert list(action) == [*JOINT_KEYS, GRIPPER_KEY]
        for key, want in zip(JOINT_KEYS, pose, strict=True):
            assert abs(action[key] - want) < 1.0, (key, action[key], want)  # encoder noise
        assert 0.0 <= action[GRIPPER_KEY] <= 100.0
        status, answer = _drag(rig, [0.0, 200.0, 0.0, 0.0, 0.0, 0.0])
        assert status == 400 and "outside the SDK limits" in answer["error"]
        status, answer = _drag(rig, [1.0, 2.0])
        assert status == 400 and "six finite angles" in answer["error"]
    finally:
        leader.disconnect()
    assert not leader.is_connected
    status, _ = _drag(rig, HOME_LIST := list(HOME))
    assert status == 409, HOME_LIST  # powered again: the arm holds where the hand left it
    with pytest.raises(LeaderError, match="not connected"):
        leader.get_action()


@pytest.mark.parametrize(
    ("body", "query", "needle"),
    [
        (b'{"angles": "x"}', "", 'body must be a JSON object {"angles": [six numbers]}'),
        (b'{"angles": [0, 0, 0, 0, 0, 0], "more": 1}', "", "body must be a JSON object"),
        (b'{"angles": [true, 0, 0, 0, 0, 0]}', "", "body must be a JSON object"),
        (b"not json", "", "body is not valid JSON"),
        (b'{"angles": [0, 0, 0, 0, 0, 0]}', "?x=1", "takes no query"),
    ],
)
def test_a_bad_drag_request_is_a_clear_400_and_the_server_keeps_serving(
    rig: SimRig, body: bytes, query: str, needle: str
) -> None:
    req = urllib.request.Request(
        rig.control_url + "/arm/drag" + query, data=body, method="POST",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(req, timeout=10)
    assert exc.value.code == 400
    assert needle in json.loads(exc.value.read())["error"]
    status, _ = _drag(rig, list(HOME))  # still serving: powered, so 409
    assert status == 409


def test_a_drag_teach_leader_without_its_daemon_is_one_clear_error(tmp_path: Path) -> None:
    s = load_settings(
        RuntimeSettings,
        overrides={"data_root": tmp_path, "daemon.port": 9, "daemon.connect_timeout_s": 1.0},
    )
    leader = DragTeachLeader(s)
    with pytest.raises(LeaderError, match=r"leader arm: .*is mecharm-daemon running"):
        leader.connect()
    assert not leader.is_connected


def test_keys_nudge_one_joint_within_the_sdk_limits_and_toggle_the_jaws() -> None:
    kb = KeyboardLeader(HOME, step_deg=5.0)
    assert kb.get_action() == {**dict(zip(JOINT_KEYS, HOME, strict=True)), GRIPPER_KEY: 100.0}
    kb.feed("qqw")
    a = kb.get_action()
    assert a["j0.pos"] == 10.0 and a["j1.pos"] == 5.0 and a["j2.pos"] == 0.0
    kb.feed(" ")
    assert kb.get_action()[GRIPPER_KEY] == 20.0
    kb.feed(" ")
    assert kb.get_action()[GRIPPER_KEY] == 100.0
    kb.feed("w" * 100 + "h" * 100)
    a = kb.get_action()
    assert a["j1.pos"] == JOINT_MAX[1] and a["j5.pos"] == JOINT_MIN[5]
    kb.feed("0")
    assert tuple(kb.get_action()[k] for k in JOINT_KEYS) == HOME
    kb.feed("xz!\x1b")  # not keys of the map: nothing moves
    assert tuple(kb.get_action()[k] for k in JOINT_KEYS) == HOME
    assert set(KEYMAP) == set("qawsedrftgyh")
    for bad in (0.0, 20.0):
        with pytest.raises(ValueError, match="step_deg"):
            KeyboardLeader(HOME, step_deg=bad)


def test_the_keyboard_leader_reads_a_real_terminal_and_gives_it_back() -> None:
    import termios

    master, slave = os.openpty()
    try:
        before = termios.tcgetattr(slave)
        kb = KeyboardLeader(HOME, step_deg=3.0, fd=slave)
        kb.connect()
        try:
            assert not termios.tcgetattr(slave)[3] & termios.ICANON  # one key at a time
            os.write(master, b"qq e")
            for _ in range(600):  # bounded: up to 30 s for the reader thread
                if kb.keys >= 4:
                    break
                time.sleep(0.05)
            a = kb.get_action()
            assert a["j0.pos"] == 6.0 and a["j2.pos"] == 3.0 and a[GRIPPER_KEY] == 20.0
        finally:
            kb.disconnect()
        assert termios.tcgetattr(slave) == before
    finally:
        os.close(master)
        os.close(slave)


def test_the_keyboard_leader_refuses_input_that_is_not_a_terminal() -> None:
    r, w = os.pipe()
    try:
        with pytest.raises(LeaderError, match="not one: run it in a terminal"):
            KeyboardLeader(HOME, fd=r).connect()
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.slow
def test_keys_that_drive_the_tool_into_the_mat_stop_the_follower_above_it(
    rig: SimRig, tmp_path: Path
) -> None:
    """From the hover above a block, j1 pushed forward by keys until the pose is below the
    mat: the follower steps toward it, each step bounded against the reading, and the
    guards refuse the steps whose path reaches the mat; the tool never goes below it."""
    follower = MecharmRobot(_settings(rig, tmp_path), max_step_deg=5.0)
    kb = KeyboardLeader(HOVER, step_deg=5.0)
    follower.connect()
    try:
        margin = follower.settings.arm.path_mat_margin_m
        for _ in range(600):  # to the hover first (the leader starts there), at ~10 Hz
            obs = follower.get_observation()
            if max(abs(obs[k] - h) for k, h in zip(JOINT_KEYS, HOVER, strict=True)) < 1.0:
                break
            follower.send_action(kb.get_action())
            time.sleep(0.1 / 20)  # the rig's time scale: a tick of 0.1 s in its time
        else:
            pytest.fail(f"the follower did not reach the hover: {obs}")
        kb.feed("w" * 5)  # j1 67.5 -> 88: the pose is below the mat's surface
        target = tuple(kb.get_action()[k] for k in JOINT_KEYS)
        assert float(fk_tip(target)[1]) < 0.0
        held = 0
        for _ in range(200):
            time.sleep(0.1 / 20)
            before = follower.get_observation()
            sent = follower.send_action(kb.get_action())
            pose = tuple(sent[k] for k in JOINT_KEYS)
            assert max(abs(sent[k] - before[k]) for k in JOINT_KEYS) <= 5.0 + 0.011
            if pose == tuple(before[k] for k in JOINT_KEYS):  # refused: the arm holds
                held += 1
                # a reading, not a command: the arm settles within its settle error of the
                # step sent last (j1 up to ~0.6° for a 5° step, the others 0.15°:
                # docs/daemon.md) and reads with 0.08° of noise, which can put the tip
                # inside the margin (seen: 1.2 mm of 5), not through the mat (1 mm: noise)
                assert float(fk_tip(pose)[1]) >= -0.001
            else:  # sent: the command itself keeps the margin
                assert float(fk_tip(pose)[1]) >= margin
        assert held > 0  # the guards held the arm where the next step would cross the mat
        time.sleep(0.2)
        now = follower.get_observation()
        assert float(fk_tip(tuple(now[k] for k in JOINT_KEYS))[1]) >= 0.0
    finally:
        follower.disconnect()
