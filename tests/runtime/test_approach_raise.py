"""approach_place raised above the place band (docs/stages.md, "approach_place"): the held
block crosses the box's wall no lower than it will descend to. The raised pose keeps the arc
pose's x-z, stays near it, passes every guard, and an arm that holds the block as low as the
``harsh`` one carries it over the wall with room to spare."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mecharm.common.kinematics import fk_tip
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.guard import check_pose
from mecharm.runtime.lookup.j0 import j0_lookup
from mecharm.runtime.memories import HEIGHT_LIMIT_MM, HeightMemory, cell_key
from mecharm.runtime.pick_place import place
from mecharm.sim.scene import BOX_HEIGHT_M, BOX_OUTER_M
from mecharm.sim.world_arm import ARM_TRUTHS, WorldArm
from tests.runtime.offline_ctx import offline_context

# where the simulated scenes put the box (x, z in m): its centre and the corners of the region
BOXES = [(-0.199, 0.173), (-0.14, 0.20), (-0.22, 0.14), (-0.26, 0.20), (-0.12, 0.25)]
#: a lift pose the pick side ends at with the block (harsh seed 9300's, from its trace)
LIFTED = (-37.3, 87.74, -38.33, 3.6, -70.11, -30.0)


def _ctx(tmp_path: Path, box: tuple[float, float], dee: float | None, **settings: Any) -> Any:
    s = RuntimeSettings(data_root=tmp_path, **settings)
    heights = HeightMemory(tmp_path / "h.json")
    if dee is not None:
        heights.entries[cell_key("place", *box, s.pick_place.cell_mm)] = {"dee_y_mm": dee, "n": 3}
    return offline_context(s, box, heights=heights)


def _raise(ctx: Any) -> tuple[tuple[float, ...], tuple[float, ...], dict[str, Any] | None]:
    box = ctx.state.scene.box_xz
    arc = tuple(j0_lookup(ctx.arc_place, box).angles)
    pose = place._raised_approach(ctx, arc, box)
    raised = [e["value"] for e in ctx.trace.lines if e.get("kind") == "approach_raise"]
    return arc, pose, raised[-1] if raised else None


@pytest.mark.parametrize("box", BOXES)
@pytest.mark.parametrize("dee", [15.0, 30.0, 45.0, 60.0, HEIGHT_LIMIT_MM[1]])
def test_the_approach_is_raised_to_the_bands_top_and_stays_a_safe_pose(
    tmp_path: Path, box: tuple[float, float], dee: float
) -> None:
    ctx = _ctx(tmp_path, box, dee)
    arc, pose, raised = _raise(ctx)
    want = place._place_band(ctx)[1] + ctx.settings.pick_place.place_approach_above_band_mm / 1000
    arc_tip, tip = fk_tip(arc), fk_tip(pose)
    if float(arc_tip[1]) >= want:  # the arc is high enough: nothing to raise
        assert pose == arc and raised is None
        return
    assert raised is not None
    if not raised["ok"]:  # out of the solver's reach: the arc pose, and the trace says so
        assert pose == arc and raised["angles"] is None
        return
    assert abs(float(tip[1]) - want) <= 0.002
    assert math.dist((tip[0], tip[2]), (arc_tip[0], arc_tip[2])) <= 0.002  # over the same spot
    assert max(abs(a - b) for a, b in zip(pose, arc, strict=True)) <= place._RAISE_BOX_DEG
    assert pose[5] == arc[5]  # the flange keeps its angle
    verdict = check_pose(pose, j1_max=ctx.settings.arm.j1_max, lookup_ok=True)
    assert verdict.ok, verdict.reason
    # the move from the lift is checked like any other (tip and wrist above the mat, outside
    # the box), and passes
    ctx.last_commanded = LIFTED
    _checks, refusal = ctx.motion_checks(pose, near_work=False, into_box=False)
    assert refusal is None


def test_the_raise_solves_for_every_band_the_memory_can_hold_at_the_box_centre(
    tmp_path: Path,
) -> None:
    for dee in np.arange(0.0, HEIGHT_LIMIT_MM[1] + 1, 5.0):
        ctx = _ctx(tmp_path, BOXES[0], float(dee))
        _arc, _pose, raised = _raise(ctx)
        assert raised is None or raised["ok"], (dee, raised)


def test_a_harsh_arm_carries_the_block_over_the_wall_higher_than_from_the_arc(
    tmp_path: Path,
) -> None:
    """The harsh arm with the block (its sag and load sag, backlash on the side it moves):
    along the joint-space move from the lift to the approach, while the tip is over the box's
    outer footprint, the lowest true tip height. From the arc's fixed pose the hanging block
    (its bottom 25-35 mm below the tip) meets the 43 mm rim; raised for the band the memory
    learnt after two lost blocks (+35 mm), it crosses 10 mm above it or more."""
    world = WorldArm(ARM_TRUTHS["harsh"])
    box = BOXES[0]

    def lowest_over_box(target: tuple[float, ...]) -> float:
        a, b = np.asarray(LIFTED), np.asarray(target)
        lows = []
        for t in np.linspace(0.0, 1.0, 201):
            q = a + (b - a) * t
            tip = world.tip(q, holding=True, direction=np.sign(b - a))
            if max(abs(tip[0] - box[0]), abs(tip[2] - box[1])) <= BOX_OUTER_M / 2 + 0.02:
                lows.append(float(tip[1]))
        assert lows, "the move never came over the box"
        return min(lows)

    arc, _pose, _ = _raise(_ctx(tmp_path, box, 15.0))
    _arc, raised, info = _raise(_ctx(tmp_path, box, 35.0))
    assert info is not None and info["ok"]
    from_arc, from_raised = lowest_over_box(arc), lowest_over_box(raised)
    assert from_arc - 0.035 < BOX_HEIGHT_M + 0.005  # the block's bottom reaches the rim
    assert from_raised - 0.035 > BOX_HEIGHT_M + 0.010  # 10 mm clear of it
    assert from_raised > from_arc + 0.01
    # the first trial, nothing learnt yet: the default clearance alone lifts the hanging
    # block's bottom over the rim (the arc's pose left it at the rim's height)
    _arc, first, info = _raise(_ctx(tmp_path, box, None))
    assert info is not None and info["ok"]
    assert lowest_over_box(first) - 0.035 > BOX_HEIGHT_M + 0.005  # 12.7 mm; the arc: -2.1


def test_no_raise_at_the_plain_band_without_the_clearance(tmp_path: Path) -> None:
    # an empty memory starts at height_start_mm (15): the band's top stays under the arc pose
    ctx = _ctx(tmp_path, BOXES[0], None, place_approach_above_band_mm=0.0)
    arc, pose, raised = _raise(ctx)
    assert pose == arc and raised is None


@pytest.mark.parametrize("box", BOXES)
def test_the_first_trial_raises_the_approach_by_the_clearance(
    tmp_path: Path, box: tuple[float, float]
) -> None:
    """An empty memory (the band's top at 115 mm) plus the default clearance (20 mm) is
    above the arc's pose (118 mm): the first trial's approach is raised, before the memory
    has learnt anything about how low the arm holds the block."""
    ctx = _ctx(tmp_path, box, None)
    assert ctx.settings.pick_place.place_approach_above_band_mm == 20.0
    arc, pose, raised = _raise(ctx)
    assert raised is not None and raised["ok"], raised
    assert float(fk_tip(pose)[1]) > float(fk_tip(arc)[1]) + 0.010


@pytest.mark.parametrize("value", [-1.0, 51.0, float("nan"), "high"])
def test_a_bad_clearance_is_refused(value: object) -> None:
    with pytest.raises(ValueError, match="place_approach_above_band_mm"):
        RuntimeSettings(place_approach_above_band_mm=value)  # type: ignore[arg-type]
