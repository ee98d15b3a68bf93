"""The path check (mecharm/runtime/pathcheck.py): the joint-space path, not only its ends."""

from __future__ import annotations

import asyncio
import itertools
import math
from typing import Any

import numpy as np
import pytest

from mecharm.common.config import ConfigError, load_settings
from mecharm.common.kinematics import fk_frames, fk_tip, fk_wrist_tip
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.pathcheck import Workspace, check_path, sample_path
from mecharm.runtime.safe_arm import MotionRefused

#: Two poses with tip and wrist at least 37 mm above the mat whose joint-linear path dips
#: 24 mm below it (found by a random search over the workspace).
DIP_A = (-8.0, 55.0, 24.0, 0.0, 86.0, -30.0)
DIP_B = (-8.0, 29.0, -35.0, 0.0, 37.0, -30.0)
#: The adopted approach_place pose at j0 = 45 and a lattice row 33 mm deeper, 8 mm from
#: the point below the approach.
ABOVE_BOX = (45.0, 57.39, 17.49, 0.08, -89.2, -29.44)
IN_BOX = (35.0, 67.39, 12.49, -14.92, -74.2, -29.44)


def test_wrist_tip_matches_fk_frames_and_fk_tip() -> None:
    q = np.random.default_rng(0).uniform(-90, 90, (64, 6))
    both = fk_wrist_tip(q)
    assert np.array_equal(both[:, 1], fk_tip(q))
    assert np.array_equal(both[:, 0], fk_frames(q)[:, 6])
    assert fk_wrist_tip(q[0]).shape == (2, 3)


def test_samples_include_both_ends_and_respect_the_step() -> None:
    q = sample_path((0, 0, 0, 0, 0, 0), (10, -25, 0, 0, 0, 0), 1.0)
    assert np.array_equal(q[0], np.zeros(6)) and np.allclose(q[-1], (10, -25, 0, 0, 0, 0))
    assert np.abs(np.diff(q, axis=0)).max() <= 1.0 + 1e-12
    assert sample_path((0,) * 6, (0,) * 6).shape == (2, 6)


def test_path_dipping_below_the_mat_between_safe_ends_is_refused() -> None:
    ws = Workspace(mat_margin_m=0.005)
    for end in (DIP_A, DIP_B):  # both ends are safe on their own
        assert fk_wrist_tip(end)[:, 1].min() > 0.03
        assert check_path(end, end, ws).ok
    v = check_path(DIP_A, DIP_B, ws)
    assert not v.ok and v.obstacle == "mat"
    assert v.sample is not None and 0 < v.sample < v.samples - 1  # in the middle of the path
    assert v.xyz is not None and v.xyz[1] < 0.005
    assert f"path sample {v.sample}/" in v.reason and "below the mat margin" in v.reason
    assert v.point in ("tip", "wrist") and v.point in v.reason
    # a coarser sampling would have stepped over it: the samples matter
    assert check_path(DIP_A, DIP_B, ws, step_deg=100.0).ok


def test_low_sweep_through_the_box_is_refused_and_names_the_box() -> None:
    mid = IN_BOX  # tip 44 mm above the mat (below the rim + margin), 0.27 m out
    tip = fk_tip(mid)
    ws = Workspace(box_xz=(float(tip[0]), float(tip[2])))
    assert tip[1] < ws.box_top_m
    a = (mid[0] - 30.0, *mid[1:])
    b = (mid[0] + 30.0, *mid[1:])
    assert check_path(a, a, ws).ok and check_path(b, b, ws).ok  # both ends clear of the box
    v = check_path(a, b, ws)
    assert not v.ok and v.obstacle == "box"
    assert "inside the box at" in v.reason and "mm from its centre" in v.reason
    # the same sweep with the box elsewhere is clear
    assert check_path(a, b, Workspace(box_xz=(0.3, -0.3))).ok
    # into_box does not open the walls: the sweep enters through them
    assert not check_path(a, b, ws, into_box=True).ok


def test_placing_into_the_box_is_allowed_only_when_marked() -> None:
    t = fk_tip(ABOVE_BOX)
    ws = Workspace(box_xz=(float(t[0]), float(t[2])))
    assert fk_tip(IN_BOX)[1] < ws.box_top_m  # the tip goes below the rim
    assert check_path(ABOVE_BOX, IN_BOX, ws, into_box=True).ok
    v = check_path(ABOVE_BOX, IN_BOX, ws, into_box=False)
    assert not v.ok and v.obstacle == "box"


def test_leaving_an_obstacle_is_judged_by_the_target() -> None:
    ws = Workspace(mat_margin_m=0.005)
    low = (-8.0, 29.0, -35.0, 0.0, 37.0, -30.0)
    q = sample_path(DIP_A, DIP_B, 1.0)
    y = fk_wrist_tip(q)[:, :, 1].min(axis=1)
    stuck = tuple(float(v) for v in q[int(np.argmin(y))])  # a pose below the mat
    v = check_path(stuck, low, ws)
    assert v.ok and "target checked only" in v.reason
    assert not check_path(low, stuck, ws).ok  # going there is refused


@pytest.mark.parametrize("margin", [0.0, 0.005, 0.02])
def test_box_radii_hold_the_box_whatever_its_yaw(margin: float) -> None:
    ws = Workspace(box_xz=(0.0, 0.2), box_margin_m=margin)
    half_outer = 0.035 + 0.004
    assert ws.box_outer_radius_m == pytest.approx(half_outer * math.sqrt(2) + margin)
    assert ws.box_inner_radius_m == pytest.approx(0.035 - margin)
    assert ws.box_top_m == pytest.approx(0.043 + margin)


# ---- SafeArm.move (as a stage calls it): the checks run before anything is sent


class _NoArm:
    """Any call is a failure: a refused move must never reach the arm."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the arm was asked to {name}")


def _ctx(**settings: Any) -> Any:
    from mecharm.runtime.pick_place import Stage
    from tests.runtime.offline_ctx import offline_context

    t = fk_tip(ABOVE_BOX)
    ctx = offline_context(RuntimeSettings(**settings), (float(t[0]), float(t[2])), arm=_NoArm())
    ctx.stage = Stage.DESCEND_PICK
    return ctx


def _checks(ctx: Any) -> list[dict[str, Any]]:
    return [e["value"] for e in ctx.trace.lines if e.get("kind") == "motion_check"]


def test_move_refuses_a_near_work_jump_from_the_last_commanded_pose() -> None:
    ctx = _ctx()
    approach = (-36.673, 87.74, -38.33, 3.6, -70.11, -30.0)  # the pick arc's, tip 110 mm up
    ctx.last_commanded = approach
    ctx.last_measured = (-36.0, 87.0, -38.0, 3.6, -70.0, -30.0)  # within the arrival tolerance
    target = (*approach[:4], approach[4] - 20.0, approach[5])
    with pytest.raises(
        MotionRefused,
        match=r"joint step refused: j4 -20.0° from the last commanded pose > joint_step_max_deg 15°",
    ):
        asyncio.run(ctx.move(target, 3.0, "pick descend", near_work=True))
    (check,) = _checks(ctx)
    assert check["joint_step"]["ok"] is False and check["joint_step"]["joint"] == 4
    # the same move not near the work is not bounded (and its path is clear)
    assert ctx.motion_checks(target, near_work=False, into_box=False)[1] is None


def test_move_refuses_a_path_below_the_mat_and_through_the_box() -> None:
    ctx = _ctx()
    ctx.last_measured = DIP_A
    with pytest.raises(MotionRefused, match=r"path check refused: path sample \d+/\d+ .* mat"):
        asyncio.run(ctx.move(DIP_B, 3.0, "home"))
    assert _checks(ctx)[-1]["path"]["obstacle"] == "mat"
    ctx.last_measured = ABOVE_BOX
    with pytest.raises(MotionRefused, match="inside the box"):
        asyncio.run(ctx.move(IN_BOX, 3.0, "approach_place"))
    # placing: allowed by the path check; the bound still applies (j4 moves 15°: at the bound)
    ctx.last_commanded = ABOVE_BOX
    checks, refusal = ctx.motion_checks(IN_BOX, near_work=True, into_box=True)
    assert refusal is None and checks["path"]["ok"] and checks["joint_step"]["ok"]


def test_the_path_check_cannot_be_switched_off() -> None:
    """The joint bound off (0) leaves the path check: the dip between safe ends is refused."""
    ctx = _ctx(joint_step_max_deg=0.0)
    ctx.last_commanded = ctx.last_measured = DIP_A
    checks, refusal = ctx.motion_checks(DIP_B, near_work=True, into_box=False)
    assert "joint_step" not in checks and not checks["path"]["ok"]
    assert refusal is not None and refusal.startswith("path check refused")
    with pytest.raises(ConfigError, match="path_check: removed setting"):
        load_settings(RuntimeSettings, overrides={"path_check": False})


@pytest.mark.parametrize("bound", [15.0, 0.0])
def test_the_way_out_of_the_box_retraces_the_way_in_within_the_bound(bound: float) -> None:
    """Four 5° servo steps on j0 after a 12° descent on j4: the approach is 20° away from the
    last pose, each step was within the bound. The retreat goes back the way in, skipping
    every waypoint one bounded move can pass: here one stop (the first servo step)."""
    ctx = _ctx(joint_step_max_deg=bound)
    approach = (30.0, 60.0, -20.0, 0.0, -40.0, -30.0)
    descent = (*approach[:4], approach[4] - 12.0, approach[5])
    steps = [(descent[0] + 5.0 * k, *descent[1:]) for k in range(1, 5)]
    way_in = [descent, *steps]
    sent: list[tuple[float, ...]] = []

    async def move(target: Any, tol: float, note: str, **kw: Any) -> None:
        assert kw["near_work"] is True
        sent.append(tuple(target))
        ctx.last_commanded = tuple(target)

    ctx.safe.move = move  # the safe arm retraces through its own move
    ctx.last_commanded = steps[-1]
    asyncio.run(ctx.retrace([*reversed(way_in[:-1]), approach], 3.0, "retreat up"))
    if bound:
        assert sent == [steps[0], approach]
        poses = [steps[-1], *sent]
        for a, b in itertools.pairwise(poses):
            assert max(abs(x - y) for x, y in zip(a, b, strict=True)) <= bound
    else:
        assert sent == [approach]  # no bound: one move, as before
    # and back in (release anyway): the same way forward, ending at the last servo pose
    sent.clear()
    ctx.last_commanded = approach
    asyncio.run(ctx.retrace(way_in, 3.0, "release anyway: back down"))
    assert sent[-1] == steps[-1] and (len(sent) == 2 if bound else len(sent) == 1)
