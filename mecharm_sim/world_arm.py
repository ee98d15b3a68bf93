"""The simulated arm's true kinematics: the world's arm is not the runtime's model.

The runtime plans with the nominal URDF chain (``mecharm_common.kinematics``). A real
arm differs: each joint's encoder zero is off by a little, links are not exactly the
drawing's length, gears have backlash and the arm sags under load. ``WorldArm``
applies an ``ArmTruth`` to the encoder angles the simulated firmware reports, so the
physics and the renderer put the tool where the world's arm would, while every
reading the runtime gets stays the encoder's (docs/simulation.md, "The arm").

``ArmTruth()`` (all zeros) is the ideal arm: ``WorldArm`` then equals the nominal FK.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from pydantic import BaseModel, ConfigDict

from mecharm_common.kinematics import fk_frames, fk_tip

__all__ = ["ARM_TRUTHS", "ArmTruth", "WorldArm"]

_Six = tuple[float, float, float, float, float, float]
_ZERO6: _Six = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


class ArmTruth(BaseModel):
    """How the world's arm differs from the nominal model (all zero: the ideal arm)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    zero_offset_deg: _Six = _ZERO6


#: The arm of each named profile (docs/simulation.md); filled per profile.
ARM_TRUTHS: dict[str, ArmTruth] = {"ideal": ArmTruth(), "rig": ArmTruth(), "harsh": ArmTruth()}


class WorldArm:
    """Encoder angles -> where the world's arm really is (joint frames and tool tip)."""

    def __init__(self, truth: ArmTruth | None = None, arm: Any = None) -> None:
        self.truth = truth or ArmTruth()
        self.arm = arm

    def joint_angles(self, angles_deg: ArrayLike) -> NDArray[np.float64]:
        """The joints' true angles for encoder readings ``angles_deg`` (shape (..., 6))."""
        return np.asarray(angles_deg, dtype=np.float64) + np.asarray(self.truth.zero_offset_deg)

    def frames(self, angles_deg: ArrayLike) -> NDArray[np.float64]:
        """Base, joint frames and tool tip, shape (..., 8, 3) like ``fk_frames``."""
        return fk_frames(self.joint_angles(angles_deg))

    def tip(self, angles_deg: ArrayLike) -> NDArray[np.float64]:
        """The true tool tip, shape (..., 3) like ``fk_tip``."""
        return fk_tip(self.joint_angles(angles_deg))
