"""Named simulator profiles: how far the simulated world disagrees with the runtime.

A profile bundles everything the world does differently from the runtime's model:
the arm's true kinematics (``world_arm.ArmTruth``), the cameras' true optics and
image effects (``optics.OpticsProfile``), contact physics (``contact.ContactProfile``)
and the rig's timing (``timing.RigTiming``). Three are built in
(docs/simulation.md): ``ideal`` agrees with the runtime by construction (the
simulator before profiles existed), ``rig`` disagrees as the real rig does (the
default of ``make run`` and the demo), ``harsh`` is worse than the rig.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mecharm.common.config import describe_errors
from mecharm.sim.contact import CONTACT_PROFILES, ContactProfile
from mecharm.sim.optics import OPTICS_PROFILES, OpticsProfile
from mecharm.sim.timing import TIMING_PROFILES, RigTiming
from mecharm.sim.world_arm import ARM_TRUTHS, ArmTruth

__all__ = ["PROFILE_NAMES", "ProfileError", "SimProfile", "load_profile"]

PROFILE_NAMES: tuple[str, ...] = ("ideal", "rig", "harsh")


class ProfileError(ValueError):
    """A profile spec (name or file) is invalid; the message names what and what to do."""


class SimProfile(BaseModel):
    """Everything the simulated world does differently from the runtime's model."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = "ideal"
    arm: ArmTruth = Field(default_factory=ArmTruth)
    optics: OpticsProfile = Field(default_factory=OpticsProfile)
    contact: ContactProfile = Field(default_factory=ContactProfile)
    timing: RigTiming = Field(default_factory=RigTiming)

    def top_camera_calibration(self) -> dict[str, Any] | None:
        """The runtime's ``top_camera_calibration`` for this world's top camera: what the
        operator's checkerboard calibration would give (close to, not equal to, the truth;
        docs/simulation-optics.md). None for the ideal pinhole."""
        nominal = self.optics.top.nominal
        return None if nominal is None else nominal.model_dump()


def builtin_profile(name: str) -> SimProfile:
    return SimProfile(
        name=name,
        arm=ARM_TRUTHS[name],
        optics=OPTICS_PROFILES[name],
        contact=CONTACT_PROFILES[name],
        timing=TIMING_PROFILES[name],
    )


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_profile(spec: str) -> SimProfile:
    """A built-in name (``ideal``, ``rig``, ``harsh``) or a YAML file whose ``base`` names a
    built-in profile and whose other keys override parts of it."""
    if spec in PROFILE_NAMES:
        return builtin_profile(spec)
    path = Path(spec)
    if not path.suffix:
        raise ProfileError(
            f"sim profile {spec!r}: unknown name (use one of {list(PROFILE_NAMES)} "
            "or a path to a .yaml file)"
        )
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ProfileError(f"sim profile file {path}: cannot read: {why}") from None
    if not isinstance(data, dict):
        raise ProfileError(f"sim profile file {path}: top level must be a mapping")
    base = data.pop("base", "ideal")
    if base not in PROFILE_NAMES:
        raise ProfileError(
            f"sim profile file {path}: base {base!r} is not one of {list(PROFILE_NAMES)}"
        )
    merged = _merge(builtin_profile(base).model_dump(), {"name": f"{base}+{path.name}", **data})
    try:  # model_validate: a non-string key (``1: 2``) is an error naming it, not a TypeError
        return SimProfile.model_validate(merged)
    except ValidationError as exc:
        raise ProfileError(f"sim profile file {path}: {describe_errors(exc, SimProfile)}") from None
