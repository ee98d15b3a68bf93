"""Profile part: contact physics between block, box, mat and fingers (docs/simulation.md)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["CONTACT_PROFILES", "ContactProfile"]


class ContactProfile(BaseModel):
    """contact physics between block, box, mat and fingers; the defaults are the ideal world."""

    model_config = ConfigDict(extra="forbid", frozen=True)


CONTACT_PROFILES: dict[str, ContactProfile] = {
    "ideal": ContactProfile(),
    "rig": ContactProfile(),
    "harsh": ContactProfile(),
}
