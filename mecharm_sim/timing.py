"""Profile part: the rig's timing outside the arm's motion (docs/simulation.md)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["TIMING_PROFILES", "RigTiming"]


class RigTiming(BaseModel):
    """the rig's timing outside the arm's motion; the defaults are the ideal world."""

    model_config = ConfigDict(extra="forbid", frozen=True)


TIMING_PROFILES: dict[str, RigTiming] = {
    "ideal": RigTiming(),
    "rig": RigTiming(),
    "harsh": RigTiming(),
}
