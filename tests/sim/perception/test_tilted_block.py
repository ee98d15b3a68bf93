"""The place judge on frames a rollout saved (tests/sim/perception/data/rig_tilted_in_box):
a block that fell into the box tilted against a wall, which the simulator had in the box and
the judge called "on the rim" (docs/perception.md, "Judges that know the height")."""

from __future__ import annotations

import asyncio

import pytest

from mecharm.runtime.perception import judge as J

from .test_harsh_frames import _evidence


def test_a_block_tilted_in_the_box_is_placed_not_on_the_rim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ev, cfg = _evidence("rig_tilted_in_box")
    v = asyncio.run(J.GeometricJudge(cfg).judge_place(ev))
    (f,) = v.details["frames"]
    # two faces seen: the size reads a top face higher than anything can rest
    assert f["top_height_mm"] > 68.0 + J.RIM_SIZE_ABOVE_MM, f
    assert f["red_on_rim_mm2"] < 40.0 and f["margin_mm"] > 0  # inside, nothing over the rim
    assert f["rests_on"] == "floor" and v.verdict == "yes", v.reason
    # without the upper bound the same frame was judged on the rim (the run's verdict)
    monkeypatch.setattr(J, "RIM_SIZE_ABOVE_MM", 1000.0)
    old = asyncio.run(J.GeometricJudge(cfg).judge_place(ev))
    assert old.verdict == "no" and "rests on the box's rim" in old.reason
