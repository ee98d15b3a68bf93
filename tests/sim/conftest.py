"""Fixtures shared by the workcell and perception tests: a fast, exact SimArm and a workcell around it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from mecharm_common.kinematics import fk_tip
from mecharm_sim.arm import SimArm, SimArmConfig
from mecharm_sim.scene import Pose, SceneLayout
from mecharm_sim.workcell import Workcell, WorkcellConfig


@dataclass
class Rig:
    """An exact SimArm (lands on target, 50x real time) inside an in-process workcell."""

    arm: SimArm
    wc: Workcell
    # Two poses of the real rig's FK table (docs/kinematics.md): a pick descend and a place pose.
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

    def layout(
        self,
        block: tuple[float, float],
        box: tuple[float, float],
        block_yaw: float = 0.0,
        box_yaw: float = 0.0,
    ) -> None:
        self.wc.next_scene(
            layout=SceneLayout(
                block=Pose(x=block[0], z=block[1], yaw_deg=block_yaw),
                box=Pose(x=box[0], z=box[1], yaw_deg=box_yaw),
            )
        )


def exact_arm() -> SimArm:
    return SimArm(
        SimArmConfig(
            time_scale=50,
            settle_error_deg=(0, 0, 0, 0, 0, 0),
            hold_error_deg=0,
            noise_deg=0,
            read_latency_s=0,
            write_latency_s=0,
            initial_angles=Rig.HOME,
        )
    )


@pytest.fixture
def rig() -> Iterator[Rig]:
    arm = exact_arm()
    wc = Workcell(arm, "random", seed=3, config=WorkcellConfig())
    try:
        yield Rig(arm, wc)
    finally:
        wc.close()
