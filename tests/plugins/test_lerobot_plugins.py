"""The two lerobot plugins (plugins/) against a stand-in for lerobot's interfaces
(fake_lerobot/, README there) and a real simulated daemon process with its MJPEG top
camera: registered under their names, every abstract method there, lerobot's errors,
the robot's features and a bounded action end to end. `make robot-check` does the same
with the real lerobot."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import cv2
import numpy as np
import pytest

from mecharm.cameras.mjpeg_http import MjpegHttpCamera
from mecharm.tools.simrig import SimRig, start_sim_daemon

ROOT = Path(__file__).resolve().parents[2]
PATHS = [
    Path(__file__).parent / "fake_lerobot",
    ROOT / "plugins" / "lerobot_robot_mecharm",
    ROOT / "plugins" / "lerobot_camera_mecharm",
    ROOT / "plugins" / "lerobot_teleoperator_mecharm",
]
PLUGINS = ("lerobot_robot_mecharm", "lerobot_camera_mecharm", "lerobot_teleoperator_mecharm")
OURS = ("lerobot", *PLUGINS)
TOKEN = "plugin-test-token-0123456789abcdef"
JOINTS = [f"j{i}.pos" for i in range(6)]


@pytest.fixture(scope="module")
def lerobot() -> Iterator[dict[str, ModuleType]]:
    """The stand-in and the three plugins importable for this module only (nothing else in the
    worker sees a ``lerobot``), imported as register_third_party_plugins() imports them."""
    saved = list(sys.path)
    sys.path[:0] = [str(p) for p in PATHS]
    try:
        mods = {name: importlib.import_module(name) for name in PLUGINS}
        for name in ("lerobot.robots.config", "lerobot.robots.utils", "lerobot.cameras.configs",
                     "lerobot.cameras.utils", "lerobot.utils.errors",
                     "lerobot.teleoperators.config", "lerobot.teleoperators.utils"):  # fmt: skip
            mods[name] = importlib.import_module(name)
        yield mods
    finally:
        sys.path[:] = saved
        for name in [m for m in sys.modules if m.split(".")[0] in OURS]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimRig]:
    sim = start_sim_daemon(tmp_path_factory.mktemp("plugins") / "logs", time_scale=20, token=TOKEN)
    try:
        yield sim
    finally:
        sim.daemon.stop()


def _config(lr: dict[str, ModuleType], rig: SimRig, tmp: Path, **cams: Any) -> Any:
    cls = lr["lerobot.robots.config"].RobotConfig.get_choice_class("mecharm270")
    return cls(
        id="t", calibration_dir=tmp / "calib", daemon_port=rig.daemon_port,
        token_file=str(rig.token_file), max_relative_target=4.0, cameras=cams,
    )  # fmt: skip


def _camera(lr: dict[str, ModuleType], url: str, **kw: Any) -> Any:
    return lr["lerobot.cameras.configs"].CameraConfig.get_choice_class("mjpeg_http")(url=url, **kw)


def test_both_plugins_register_under_their_names(lerobot: dict[str, ModuleType]) -> None:
    assert "mecharm270" in lerobot["lerobot.robots.config"].RobotConfig.get_known_choices()
    assert "mjpeg_http" in lerobot["lerobot.cameras.configs"].CameraConfig.get_known_choices()
    robot_cls = lerobot["lerobot_robot_mecharm"].Mecharm
    cam_cls = lerobot["lerobot_camera_mecharm"].MjpegHttp
    assert not robot_cls.__abstractmethods__ and not cam_cls.__abstractmethods__
    assert robot_cls.name == "mecharm270"
    tele = lerobot["lerobot.teleoperators.config"].TeleoperatorConfig
    assert "mecharm_scripted" in tele.get_known_choices()
    assert not lerobot["lerobot_teleoperator_mecharm"].MecharmScripted.__abstractmethods__


def test_the_scripted_leader_follows_its_path_and_speaks_the_robot_s_features(
    lerobot: dict[str, ModuleType], tmp_path: Path
) -> None:
    mod = lerobot["lerobot_teleoperator_mecharm"]
    cfg = lerobot["lerobot.teleoperators.config"].TeleoperatorConfig.get_choice_class(
        "mecharm_scripted"
    )(id="s", calibration_dir=tmp_path, period_s=4.0)
    leader = lerobot["lerobot.teleoperators.utils"].make_teleoperator_from_config(cfg)
    assert leader.action_features == {**dict.fromkeys(JOINTS, float), "gripper.pos": float}
    errors = lerobot["lerobot.utils.errors"]
    with pytest.raises(errors.DeviceNotConnectedError):
        leader.get_action()
    leader.connect()
    a = leader.get_action()
    assert set(a) == {*JOINTS, "gripper.pos"} and abs(a["j0.pos"]) < 2.0  # it starts at HOME
    leader.disconnect()
    path = mod.scripted.path_at
    assert path(0.0)["j5.pos"] == -30.0 and path(1.0) == path(0.0)  # a closed loop
    assert path(0.30)["j0.pos"] == pytest.approx(25.0) and path(0.60)["gripper.pos"] == 30.0
    assert path(0.15)["j0.pos"] == pytest.approx(12.5)  # halfway between two waypoints
    with pytest.raises(ValueError, match="period_s"):
        type(cfg)(period_s=0.1)


def test_the_drag_teach_leader_reads_its_own_arm_through_lerobot_s_factory(
    lerobot: dict[str, ModuleType], rig: SimRig, tmp_path: Path
) -> None:
    """``--teleop.type=mecharm_leader`` against a real simulated daemon (the leader's): its
    servos released at connect (a hand may move it), powered at disconnect."""
    tele = lerobot["lerobot.teleoperators.config"].TeleoperatorConfig
    assert {"mecharm_leader", "mecharm_keyboard"} <= set(tele.get_known_choices())
    cfg = tele.get_choice_class("mecharm_leader")(
        id="l", calibration_dir=tmp_path, daemon_port=rig.daemon_port,
        token_file=str(rig.token_file),
    )  # fmt: skip
    leader = lerobot["lerobot.teleoperators.utils"].make_teleoperator_from_config(cfg)
    assert type(leader).__name__ == "MecharmLeader" and not type(leader).__abstractmethods__
    errors = lerobot["lerobot.utils.errors"]
    with pytest.raises(errors.DeviceNotConnectedError):
        leader.get_action()
    leader.connect()
    try:
        with pytest.raises(errors.DeviceAlreadyConnectedError):
            leader.connect()
        a = leader.get_action()
        assert set(a) == {*JOINTS, "gripper.pos"} and all(np.isfinite(v) for v in a.values())
        assert leader.leader.released
    finally:
        leader.disconnect()
    assert not leader.is_connected
    with pytest.raises(ValueError, match="daemon_port"):
        type(cfg)(daemon_port=0)


def test_the_keyboard_leader_through_lerobot_s_factory(
    lerobot: dict[str, ModuleType], tmp_path: Path
) -> None:
    tele = lerobot["lerobot.teleoperators.config"].TeleoperatorConfig
    cfg = tele.get_choice_class("mecharm_keyboard")(id="k", calibration_dir=tmp_path, step_deg=3)
    kb = lerobot["lerobot.teleoperators.utils"].make_teleoperator_from_config(cfg)
    assert type(kb).__name__ == "MecharmKeyboard"
    assert kb.action_features == {**dict.fromkeys(JOINTS, float), "gripper.pos": float}
    master, slave = os.openpty()
    try:
        kb.leader.fd = slave
        kb.connect()
        try:
            kb.leader.feed("q ")
            a = kb.get_action()
            assert a["j0.pos"] == 3.0 and a["gripper.pos"] == 20.0 and a["j5.pos"] == -30.0
        finally:
            kb.disconnect()
    finally:
        os.close(master)
        os.close(slave)
    with pytest.raises(ValueError, match="step_deg"):
        type(cfg)(step_deg=0)


def test_a_camera_config_is_checked_as_lerobot_checks_it(
    lerobot: dict[str, ModuleType], rig: SimRig, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="url must be http"):
        _camera(lerobot, "file:///dev/video0")
    with pytest.raises(ValueError, match="'fps' is required"):  # lerobot's robot config rule
        _config(lerobot, rig, tmp_path, top=_camera(lerobot, rig.top_url, width=320, height=180))


@pytest.mark.slow
def test_the_robot_through_lerobot_s_factory_end_to_end(
    lerobot: dict[str, ModuleType], rig: SimRig, tmp_path: Path
) -> None:
    errors = lerobot["lerobot.utils.errors"]
    cfg = _config(
        lerobot, rig, tmp_path, top=_camera(lerobot, rig.top_url, width=320, height=180, fps=10)
    )
    robot = lerobot["lerobot.robots.utils"].make_robot_from_config(cfg)
    assert robot.observation_features == {
        **dict.fromkeys(JOINTS, float),
        "gripper.pos": float,
        "top": (180, 320, 3),
    }
    assert robot.action_features == {**dict.fromkeys(JOINTS, float), "gripper.pos": float}
    with pytest.raises(errors.DeviceNotConnectedError):
        robot.get_observation()
    robot.connect()
    try:
        with pytest.raises(errors.DeviceAlreadyConnectedError):
            robot.connect()
        obs = robot.get_observation()
        assert set(obs) == {*JOINTS, "gripper.pos", "top"}
        img = obs["top"]
        assert img.shape == (180, 320, 3) and img.dtype == np.uint8
        # RGB: against the same scene read as OpenCV's BGR by the project's own reader
        with MjpegHttpCamera(rig.top_url) as direct:
            bgr = cv2.resize(direct.read().image, (320, 180), interpolation=cv2.INTER_AREA)
        flipped = np.abs(img[..., ::-1].astype(int) - bgr).mean()
        assert flipped < np.abs(img.astype(int) - bgr).mean(), flipped
        here = [obs[k] for k in JOINTS]
        sent = robot.send_action({**dict(zip(JOINTS, [h + 30.0 for h in here[:1]] + here[1:], strict=True)),
                                  "gripper.pos": 100.0})  # fmt: skip
        assert abs(sent["j0.pos"] - here[0]) <= 4.0 + 0.011  # max_relative_target
        assert sent["gripper.pos"] == 100.0
        with pytest.raises(ValueError, match="lacks"):
            robot.send_action({"j0.pos": 1.0})
    finally:
        robot.disconnect()
    assert not robot.is_connected
    with pytest.raises(errors.DeviceNotConnectedError):
        robot.send_action(dict.fromkeys(JOINTS, 0.0))


@pytest.mark.slow
def test_the_camera_reads_the_next_frame_and_the_latest_without_waiting(
    lerobot: dict[str, ModuleType], rig: SimRig
) -> None:
    cam = lerobot["lerobot.cameras.utils"].make_cameras_from_configs(
        {"top": _camera(lerobot, rig.top_url, fps=10, color_mode="bgr")}
    )["top"]
    cam.connect()
    try:
        assert (cam.height, cam.width) == (1080, 1920)  # no size given: the stream's own
        a = cam.async_read(timeout_ms=2000)
        assert a.shape == (1080, 1920, 3)
        assert cam.read_latest(max_age_ms=2000).shape == (1080, 1920, 3)
        with pytest.raises(TimeoutError, match="old"):
            cam.read_latest(max_age_ms=-1)  # every frame is older than that
    finally:
        cam.disconnect()
    assert not cam.is_connected
