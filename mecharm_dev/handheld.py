"""A workcell driven by hand, in-process: an exact simulated arm (it lands on its target,
50x real time, no noise) in a ``Workcell``, for producing outcomes to look at.

Why one home: the perception tests, the judge check (``mecharm_dev/judgecheck.py``) and
the VLM judge's tests all stage a pick or a place step by step and render what the top
camera sees; they share this instead of each building the arm and the steps again.
"""

from __future__ import annotations

from typing import Any

from mecharm.sim.arm import SimArm, SimArmConfig
from mecharm.sim.scene import Pose, SceneLayout
from mecharm.sim.workcell import Workcell, WorkcellConfig

__all__ = ["HOME", "HandheldCell", "exact_arm", "lay_out"]

Angles6 = tuple[float, float, float, float, float, float]

HOME: Angles6 = (0.0, 0.0, 0.0, 0.0, 0.0, -30.0)


def exact_arm(initial: Angles6 = HOME) -> SimArm:
    """A SimArm without settle error, hold error, noise or latency, 50x real time."""
    return SimArm(
        SimArmConfig(
            time_scale=50,
            settle_error_deg=(0, 0, 0, 0, 0, 0),
            hold_error_deg=0,
            noise_deg=0,
            read_latency_s=0,
            write_latency_s=0,
            initial_angles=initial,
        )
    )


def lay_out(
    wc: Workcell,
    block: tuple[float, float],
    box: tuple[float, float],
    block_yaw: float = 0.0,
    box_yaw: float = 0.0,
) -> None:
    """Put the block and the box of ``wc`` where given (x, z in metres), as the operator does."""
    wc.next_scene(
        layout=SceneLayout(
            block=Pose(x=block[0], z=block[1], yaw_deg=block_yaw),
            box=Pose(x=box[0], z=box[1], yaw_deg=box_yaw),
        )
    )


class HandheldCell:
    """``exact_arm()`` in a random-scene ``Workcell`` (``seed``); every step advances the physics."""

    def __init__(self, seed: int = 3, config: WorkcellConfig | None = None) -> None:
        self.arm = exact_arm()
        self.wc = Workcell(self.arm, "random", seed=seed, config=config or WorkcellConfig())

    def move(self, angles: tuple[float, ...]) -> None:
        """Send, wait until the arm is there, step the workcell; RuntimeError if it is not."""
        if self.arm.send_angles(list(angles), 100) != 1 or not self.arm.wait_idle(timeout=10):
            raise RuntimeError(f"simulated arm did not reach {angles}")
        self.wc.step()

    def grip(self, close: bool) -> None:
        """Close on the block (value 20, as the runtime) or open (state 0)."""
        if close:
            self.arm.set_gripper_value(20, 100)
        else:
            self.arm.set_gripper_state(0, 100)
        if not self.arm.wait_idle(timeout=10):
            raise RuntimeError("simulated gripper did not settle")
        self.wc.step()

    def layout(
        self,
        block: tuple[float, float],
        box: tuple[float, float],
        block_yaw: float = 0.0,
        box_yaw: float = 0.0,
    ) -> None:
        """A scene with the block and the box where given (x, z in metres)."""
        lay_out(self.wc, block, box, block_yaw, box_yaw)

    def frames(self, n: int, camera: str = "top") -> list[Any]:
        return [self.wc.render(camera) for _ in range(n)]

    def close(self) -> None:
        self.wc.close()
