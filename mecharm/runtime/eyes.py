"""The ``EyesPort`` beside the camera's (camera_eyes.py): a dry run's and the trace's.

``DryRunEyes`` looks at the real scene but models what depends on the arm having moved
(tip, held block, verdicts) from the commanded pose, because in a dry run the arm never
moves. ``TracedEyes`` writes every observation into the trace as an input, so ``mecharm
replay`` can feed a trial's decisions the same observations again.
"""

from __future__ import annotations

import math
from pathlib import Path

from mecharm.common.kinematics import fk_tip
from mecharm.runtime.arm import DryRunArm
from mecharm.runtime.camera_eyes import CameraEyes
from mecharm.runtime.perception import DEFAULT_CONFIG
from mecharm.runtime.ports import (
    EyesPort,
    ReleaseView,
    SceneObservation,
    TipObservation,
    VerdictObservation,
)
from mecharm.runtime.records.trace import TraceWriter

__all__ = ["DryRunEyes", "TracedEyes"]


class DryRunEyes:
    """The real scene (when a camera is given) with the arm-dependent observations modelled
    from the virtual arm's commanded pose: the tip is where FK puts it, the block is held."""

    def __init__(
        self, arm: DryRunArm, eyes: CameraEyes | None, scene: SceneObservation | None = None
    ) -> None:
        self.arm, self.eyes, self.fixed_scene = arm, eyes, scene
        self.block_xz: tuple[float, float] | None = None

    def start_trial(self, run_dir: Path | None) -> None:
        if self.eyes is not None:
            self.eyes.start_trial(run_dir)

    async def settle(self) -> None:
        if self.eyes is not None:
            await self.eyes.settle()

    def _tip(self) -> tuple[float, float, float]:
        x, y, z = (float(v) for v in fk_tip(self.arm.pose))
        return x, y, z

    async def observe_scene(self, tag: str) -> SceneObservation:
        if self.eyes is not None:
            obs = await self.eyes.observe_scene(tag)
        elif self.fixed_scene is not None:
            obs = self.fixed_scene
        else:
            obs = SceneObservation(False, reason="dry run without a top camera and without a scene")
        self.block_xz = obs.block_xz
        return obs

    async def measure_tip(
        self, block_xz: tuple[float, float], tip_height_m: float, tag: str
    ) -> TipObservation:
        x, _y, z = self._tip()
        dx, dz = (x - block_xz[0]) * 1000.0, (z - block_xz[1]) * 1000.0
        return TipObservation(True, dx, dz, math.hypot(dx, dz), reason="dry run: modelled from FK")

    async def locate_block(
        self, lift_m: float, near_xz: tuple[float, float], tag: str
    ) -> tuple[float, float] | None:
        x, _y, z = self._tip()
        return x, z

    async def judge_pick(self, tip_height_m: float, tag: str) -> VerdictObservation:
        return VerdictObservation("yes", 0.0, "dry run: assumed (the arm did not move)", "dry_run")

    async def judge_place(self, side_frame: str | None, tag: str) -> VerdictObservation:
        return VerdictObservation("yes", 0.0, "dry run: assumed (the arm did not move)", "dry_run")

    async def look_place(self, tag: str) -> VerdictObservation:
        return VerdictObservation(
            "no", 0.0, "dry run: not looked (the arm did not move)", "dry_run"
        )

    async def view_release(
        self, lift_m: float, box_xz: tuple[float, float], side_frame: str | None, tag: str
    ) -> ReleaseView:
        """Modelled: the block is held at the tip; its margin in an unrotated box of the
        configured size (yaws unknown without the arm moving)."""
        x, _y, z = self._tip()
        cfg = self.eyes.config if self.eyes is not None else DEFAULT_CONFIG
        half = (cfg.box_inner_m - cfg.block_size_m) / 2.0
        margin = (half - max(abs(x - box_xz[0]), abs(z - box_xz[1]))) * 1000.0
        dist = math.hypot(x - box_xz[0], z - box_xz[1]) * 1000.0
        return ReleaseView(
            1, 1, (x, z), round(dist, 2), round(margin, 2), "no_frame", "dry run: modelled from FK"
        )

    async def ask_release(self, why: str, tag: str) -> VerdictObservation:
        return VerdictObservation("no", 0.0, "dry run: not asked", "dry_run")

    async def close(self) -> None:
        if self.eyes is not None:
            await self.eyes.close()


class TracedEyes:
    """Wraps an ``EyesPort``; every observation becomes a trace input."""

    def __init__(self, inner: EyesPort, trace: TraceWriter) -> None:
        self.inner, self.trace = inner, trace

    def start_trial(self, run_dir: Path | None) -> None:
        self.inner.start_trial(run_dir)

    async def observe_scene(self, tag: str) -> SceneObservation:
        return self.trace.input("scene", await self.inner.observe_scene(tag))  # type: ignore[no-any-return]

    async def measure_tip(
        self, block_xz: tuple[float, float], tip_height_m: float, tag: str
    ) -> TipObservation:
        return self.trace.input("tip", await self.inner.measure_tip(block_xz, tip_height_m, tag))  # type: ignore[no-any-return]

    async def locate_block(
        self, lift_m: float, near_xz: tuple[float, float], tag: str
    ) -> tuple[float, float] | None:
        return self.trace.input("block_xz", await self.inner.locate_block(lift_m, near_xz, tag))  # type: ignore[no-any-return]

    async def judge_pick(self, tip_height_m: float, tag: str) -> VerdictObservation:
        return self.trace.input("pick_verdict", await self.inner.judge_pick(tip_height_m, tag))  # type: ignore[no-any-return]

    async def judge_place(self, side_frame: str | None, tag: str) -> VerdictObservation:
        return self.trace.input("place_verdict", await self.inner.judge_place(side_frame, tag))  # type: ignore[no-any-return]

    async def look_place(self, tag: str) -> VerdictObservation:
        # its own kind: a look is not the place verdict the records fold
        return self.trace.input("look_verdict", await self.inner.look_place(tag))  # type: ignore[no-any-return]

    async def view_release(
        self, lift_m: float, box_xz: tuple[float, float], side_frame: str | None, tag: str
    ) -> ReleaseView:
        return self.trace.input(  # type: ignore[no-any-return]
            "release_view", await self.inner.view_release(lift_m, box_xz, side_frame, tag)
        )

    async def ask_release(self, why: str, tag: str) -> VerdictObservation:
        return self.trace.input("release_answer", await self.inner.ask_release(why, tag))  # type: ignore[no-any-return]

    async def close(self) -> None:
        await self.inner.close()
