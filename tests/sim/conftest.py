"""Fixtures shared by the workcell and perception tests: a fast, exact SimArm and a workcell around it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mecharm.common.kinematics import fk_tip
from mecharm_dev.handheld import HOME, HandheldCell


class Rig(HandheldCell):
    """An exact SimArm (lands on target, 50x real time) inside an in-process workcell."""

    # Two poses of the real rig's FK table (docs/kinematics.md): a pick descend and a place pose.
    PICK = (-31.93, 87.74, -38.33, 18.6, -45.11, -30.0)
    PLACE = (37.059, 66.65, 2.83, -1.4, -78.04, -29.53)
    HOME = HOME

    def tip(self, angles: tuple[float, ...]) -> tuple[float, float, float]:
        x, y, z = fk_tip(angles)
        return float(x), float(y), float(z)


@pytest.fixture
def rig() -> Iterator[Rig]:
    r = Rig(seed=3)
    try:
        yield r
    finally:
        r.close()
