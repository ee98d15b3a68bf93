"""Profile part: contact physics between block, box, mat and fingers (docs/simulation-contact.md).

``engine: rules`` is the hand-written ``physics.Physics`` (the ideal world: a block drops
straight down, nothing tips, bounces or is knocked). ``engine: mujoco`` runs the block,
the box and the gripper's fingers in MuJoCo (``mujoco_physics.MujocoPhysics``): blocks tip
off the rim, bounce, are knocked by the fingers or a held block, slip from a bad grasp.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CONTACT_PROFILES", "ContactProfile"]


class ContactProfile(BaseModel):
    """Contact physics between block, box, mat and fingers; the defaults are the ideal world."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    engine: Literal["rules", "mujoco"] = Field(
        default="rules", description="rules: hand-written Physics; mujoco: MuJoCo contacts"
    )
    # ---- MuJoCo world (unused by the rules engine)
    timestep_s: float = Field(default=0.002, gt=0, le=0.01, description="MuJoCo's fixed step")
    max_steps_per_call: int = Field(
        default=250, ge=1, le=5000, description="cap per step() call: a stall never spirals"
    )
    friction: float = Field(default=0.8, gt=0, le=2, description="sliding friction, all pairs")
    restitution: float = Field(
        default=0.3, ge=0, le=0.9, description="bounce of a dropped block (velocity ratio)"
    )
    block_mass_kg: float = Field(default=0.015, gt=0, le=1)
    box_mass_kg: float = Field(default=0.060, gt=0, le=10)
    box_free: bool = Field(default=True, description="the box can be pushed (else it is fixed)")
    # ---- grasp model (docs/simulation-contact.md, "Grasp")
    grip_drop_m: float = Field(
        default=0.0125,
        ge=0,
        le=0.06,
        description="finger pads' centre below the tool point, across the tool axis",
    )
    pad_half_m: float = Field(
        default=0.0125, gt=0, le=0.03, description="finger pad half length along the tool axis"
    )
    pad_height_half_m: float = Field(
        default=0.0175, gt=0, le=0.04, description="finger pad half height across the tool axis"
    )
    grasp_lever_tol_m: float = Field(
        default=0.010,
        ge=0,
        le=0.03,
        description="block centre this far (horizontally) from the pinch point: it turns out",
    )
    grasp_min_overlap_m: float = Field(
        default=0.005, ge=0, le=0.025, description="pads overlapping the block less: it slips out"
    )
    slip_drop_deg: float = Field(
        default=25.0, gt=0, le=90, description="a slipping block falls once rotated this far"
    )


CONTACT_PROFILES: dict[str, ContactProfile] = {
    "ideal": ContactProfile(),
    "rig": ContactProfile(engine="mujoco"),
    "harsh": ContactProfile(
        engine="mujoco",
        friction=0.5,
        restitution=0.45,
        grasp_lever_tol_m=0.006,
        grasp_min_overlap_m=0.007,
        slip_drop_deg=15.0,
    ),
}
