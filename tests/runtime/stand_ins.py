"""Camera-boundary stand-in for machine tests that run before/without the simulated workcell.

``TrueStateEyes`` answers from the simulated arm's true state the way the top camera
would: the tip is where the true joint angles put it (FK), a closed gripper near the
block holds it, the place succeeds when the held block is released over the box. It
is only used where the test is about the machine (transitions, aborts, re-sends),
not about perception; the end-to-end tests use the real workcell cameras.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

from mecharm.common.kinematics import fk_tip
from mecharm.runtime.ports import (
    ReleaseView,
    SceneObservation,
    TipObservation,
    VerdictObservation,
)
from mecharm.sim.arm import SimArm


class TrueStateEyes:
    def __init__(
        self,
        arm: SimArm,
        block_xz: tuple[float, float],
        box_xz: tuple[float, float],
        fail_picks: int = 0,
        grasp_mm: float = 15.0,
    ) -> None:
        self.arm, self.block_xz, self.box_xz = arm, block_xz, box_xz
        self.fail_picks = fail_picks
        self.grasp_mm = grasp_mm
        self.held = False
        self.calls: list[str] = []

    def start_trial(self, run_dir: Path | None) -> None:
        self.calls.append("start_trial")

    def _tip(self) -> tuple[float, float, float]:
        x, y, z = (float(v) for v in fk_tip(self.arm.true_angles()))
        return x, y, z

    async def observe_scene(self, tag: str) -> SceneObservation:
        self.calls.append(tag)
        return SceneObservation(
            True, block_xz=self.block_xz, box_xz=self.box_xz, box_score=0.9, box_method="contour"
        )

    async def measure_tip(
        self, block_xz: tuple[float, float], tip_height_m: float, tag: str
    ) -> TipObservation:
        # a camera frame taken after the arm came to rest (arrival is declared within tol, still settling)
        await asyncio.to_thread(self.arm.wait_idle, 5.0)
        x, _y, z = self._tip()
        dx, dz = (x - block_xz[0]) * 1000, (z - block_xz[1]) * 1000
        self.held = math.hypot(dx, dz) <= self.grasp_mm
        return TipObservation(True, dx, dz, math.hypot(dx, dz))

    async def locate_block(
        self, lift_m: float, near_xz: tuple[float, float], tag: str
    ) -> tuple[float, float] | None:
        x, _y, z = self._tip()
        return (x, z) if self.held else None

    async def judge_pick(self, tip_height_m: float, tag: str) -> VerdictObservation:
        if self.fail_picks > 0:
            self.fail_picks -= 1
            return VerdictObservation("no", 0.9, "stand-in: scripted miss", "stand_in")
        return VerdictObservation(
            "yes" if self.held else "no", 0.9, "stand-in: true state", "stand_in"
        )

    async def judge_place(self, side_frame: str | None, tag: str) -> VerdictObservation:
        return VerdictObservation("yes", 0.9, "stand-in", "stand_in")

    async def view_release(
        self, lift_m: float, box_xz: tuple[float, float], side_frame: str | None, tag: str
    ) -> ReleaseView:
        # the held block is at the tip; its margin in an unrotated 70 mm opening (25 mm block)
        if not self.held:
            return ReleaseView(0, 3, side="no_frame", side_reason="stand-in")
        x, _y, z = self._tip()
        margin = (0.0225 - max(abs(x - box_xz[0]), abs(z - box_xz[1]))) * 1000.0
        dist = math.hypot(x - box_xz[0], z - box_xz[1]) * 1000.0
        return ReleaseView(3, 3, (x, z), dist, margin, "no_frame", "stand-in")

    async def ask_release(self, why: str, tag: str) -> VerdictObservation:
        return VerdictObservation("no", 0.0, "stand-in: nobody asked", "stand_in")

    async def close(self) -> None:
        pass
