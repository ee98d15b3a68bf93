"""Fixtures of the workcell tests: a fast, exact SimArm and a workcell around it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from daemon_pi.sim.arm import SimArm, SimArmConfig
from daemon_pi.sim.scene import Pose, SceneLayout
from daemon_pi.sim.workcell import Workcell, WorkcellConfig
from mecharm_common.kinematics import fk_tip


@dataclass
class Rig:
    """An exact SimArm (lands on target, 50x real time) inside an in-process workcell."""

    arm: SimArm
    wc: Workcell
    # Two poses of the real rig's FK table (SPEC §3): a pick descend and a place pose.
    PICK = (-31.93, 87.74, -38.33, 18.6, -45.11, -30.0)
    PLACE = (37.059, 66.65, 2.83, -1.4, -78.04, -29.53)
    HOME = (0.0, 0.0, 0.0, 0.0, 0.0, -30.0)

    def tip(self, angles: tuple[float, ...]) -> tuple[float, float, float]:
        x, y, z = fk_tip(angles)
        return float(x), float(y), float(z)

    def move(self, angles: tuple[float, ...]) -> None:
        assert self.arm.send_angles(list(angles), 100) == 1
        assert self.arm.wait_idle(timeout=10)
        self.wc.step()

    def grip(self, close: bool) -> None:
        if close:
            self.arm.set_gripper_value(20, 100)
        else:
            self.arm.set_gripper_state(0, 100)
        assert self.arm.wait_idle(timeout=10)
        self.wc.step()

    def layout(self, block: tuple[float, float], box: tuple[float, float], block_yaw: float = 0.0,
               box_yaw: float = 0.0) -> None:
        self.wc.next_scene(layout=SceneLayout(
            block=Pose(x=block[0], z=block[1], yaw_deg=block_yaw), box=Pose(x=box[0], z=box[1], yaw_deg=box_yaw)))


def exact_arm() -> SimArm:
    return SimArm(SimArmConfig(
        time_scale=50, settle_error_deg=(0, 0, 0, 0, 0, 0), hold_error_deg=0, noise_deg=0,
        read_latency_s=0, write_latency_s=0, initial_angles=Rig.HOME,
    ))


@pytest.fixture
def rig() -> Iterator[Rig]:
    arm = exact_arm()
    wc = Workcell(arm, "random", seed=3, config=WorkcellConfig())
    try:
        yield Rig(arm, wc)
    finally:
        wc.close()


class TopView:
    """Render top-camera frames of a scene in-process (no HTTP), arm at ``angles``."""

    _renderer = None
    _edits = 0  # negative versions: never equal to a real scene's (positive) version

    def __init__(self, seed: int, angles: tuple[float, ...] = Rig.HOME, layout: SceneLayout | None = None) -> None:
        from daemon_pi.sim.render import TOP_CAMERA, Renderer
        from daemon_pi.sim.scene import SceneState, random_layout

        self.state = SceneState(layout or random_layout(seed))
        if TopView._renderer is None:  # shared: the noise patterns are drawn once per process
            TopView._renderer = Renderer(TOP_CAMERA, 0)
        self.renderer = TopView._renderer
        self.angles = angles

    def frames(self, n: int = 1, **replace: object) -> list:
        import dataclasses

        from daemon_pi.sim.render import SceneSnapshot

        if replace:  # a modified snapshot must not hit the renderer's static-layer cache
            TopView._edits -= 1
            replace["version"] = TopView._edits
        snap = dataclasses.replace(SceneSnapshot.of(self.state), **replace)
        return [self.renderer.render(snap, self.angles, 100.0) for _ in range(n)]

    def truth(self) -> dict:
        return self.state.truth()


@pytest.fixture
def top_view() -> type[TopView]:
    return TopView


def _accuracy(seeds: range) -> str:
    """Render each random scene, detect, compare with ground truth; assert the done-when figures."""
    import math

    import numpy as np

    from mecharm_runtime.perception import detect_block, detect_box, estimate_homography

    eb, ex, methods = [], [], []
    for seed in seeds:
        view = TopView(seed)
        f = view.frames(2)
        H = estimate_homography(f[:1])
        block = detect_block(f[1], H)
        box = detect_box(f[1], H)
        t = view.truth()
        assert block is not None, f"seed {seed}: block not found"
        eb.append(math.hypot(block.x - t["block"]["x"], block.z - t["block"]["z"]) * 1000)
        ex.append(math.hypot(box.x - t["box"]["x"], box.z - t["box"]["z"]) * 1000)
        methods.append(box.method)
    eb_a, ex_a = np.array(eb), np.array(ex)
    summary = (f"{len(eb)} scenes: block median {np.median(eb_a):.2f} max {eb_a.max():.2f} mm; "
               f"box median {np.median(ex_a):.2f} max {ex_a.max():.2f} mm; methods {sorted(set(methods))}")
    assert np.median(eb_a) <= 2.0, summary
    assert eb_a.max() <= 5.0, summary
    assert np.median(ex_a) <= 2.0, summary
    assert ex_a.max() <= 5.0, summary
    assert methods.count("fallback") == 0, summary
    return summary


@pytest.fixture
def accuracy() -> object:
    return _accuracy
