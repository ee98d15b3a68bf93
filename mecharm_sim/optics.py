"""Profile part: the cameras' true optics and image effects (docs/simulation.md)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["OPTICS_PROFILES", "OpticsProfile"]


class OpticsProfile(BaseModel):
    """the cameras' true optics and image effects; the defaults are the ideal world."""

    model_config = ConfigDict(extra="forbid", frozen=True)


OPTICS_PROFILES: dict[str, OpticsProfile] = {
    "ideal": OpticsProfile(),
    "rig": OpticsProfile(),
    "harsh": OpticsProfile(),
}
