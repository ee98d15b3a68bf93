"""The default table (the suite's shared one, tests/conftest.py): size, exact cache,
equivalence sample, and the PICK and PLACE regions of the trial contract."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mecharm.common.layout import FK_TABLE
from mecharm.runtime.lookup import FkTable, ensure_table, fk_lookup, j0_lookup, load_arc
from mecharm.runtime.lookup.j0 import DEFAULT_PICK_ARC, DEFAULT_PLACE_ARC
from mecharm.runtime.lookup.table import read_csv_rows

from .test_equivalence import assert_same


def grid(x0: float, x1: float, z0: float, z1: float) -> list[tuple[float, float]]:
    return [
        (float(x), float(z))
        for x in np.arange(x0, x1 + 1e-9, 0.005)
        for z in np.arange(z0, z1 + 1e-9, 0.005)
    ]


def test_pick_region(default_table: FkTable) -> None:
    arc = load_arc(DEFAULT_PICK_ARC)
    d = []
    for t in grid(0.14, 0.24, 0.20, 0.28):
        assert j0_lookup(arc, t).ok
        r = fk_lookup(default_table, "pick", t, 0.010, 0.040)
        assert r.ok, r.reason  # dist_max 30 mm holds everywhere
        assert 0.010 <= r.selected_ee_y < 0.040 and r.angles[1] <= 88.0
        d.append(r.distance)
    d = np.array(d)
    assert np.mean(d <= 0.005) >= 0.93 and np.mean(d <= 0.010) >= 0.96
    # every target within the arm's reach in the pick band (<= 0.354 m from the base axis): <= 5 mm
    r = np.array([np.hypot(*t) for t in grid(0.14, 0.24, 0.20, 0.28)])
    assert np.all(d[r <= 0.354] <= 0.005)
    # the rig's pick of the block at (0.20, 0.26)
    r = fk_lookup(default_table, "pick", (0.20, 0.26), 0.010, 0.040)
    assert r.distance < 0.003


def test_place_region(default_table: FkTable) -> None:
    arc = load_arc(DEFAULT_PLACE_ARC)
    d = []
    for t in grid(-0.24, -0.14, 0.14, 0.24):
        ap = j0_lookup(arc, t)
        assert ap.ok
        r = fk_lookup(
            default_table,
            "place_withblock",
            t,
            0.070,
            0.100,
            ref_joints=ap.angles,
            joint_tol=15.0,
            ee_y_floor=0.070,
        )
        if r.ok:
            assert r.max_dj <= 15.0 and r.selected_ee_y >= 0.070
        d.append(r.distance if r.ok else np.inf)
    d = np.array(d)
    # the ±15° box around the rig's approach_place pose reaches 0.235-0.295 m from the base axis only
    assert np.mean(d <= 0.010) >= 0.68
    r = np.array([np.hypot(*t) for t in grid(-0.24, -0.14, 0.14, 0.24)])
    assert np.all(d[(r >= 0.235) & (r <= 0.295)] <= 0.010)
    # the rig's box position and the middle of the region are served within a few mm
    for t in ((-0.20, 0.18), (-0.19, 0.19), (-0.17, 0.20)):
        ap = j0_lookup(arc, t)
        r = fk_lookup(
            default_table,
            "place_withblock",
            t,
            0.070,
            0.100,
            ref_joints=ap.angles,
            joint_tol=15.0,
            ee_y_floor=0.070,
        )
        assert r.ok and r.distance < 0.005


def test_default_table(default_table_path: Path, default_table: FkTable) -> None:
    assert default_table_path.name == FK_TABLE and default_table_path.parent.name == "fk"
    assert 850_000 <= default_table.n_rows <= 1_100_000
    # the cache ensure_table made from memory is exactly what the CSV parses to
    rows = read_csv_rows(default_table_path)
    assert np.array_equal(rows[:, :3], default_table.xyz) and np.array_equal(
        rows[:, 3:], default_table.joints
    )
    # ensure_table does not rebuild an existing table
    before = default_table_path.stat().st_mtime_ns
    assert ensure_table(default_table_path.parent.parent) == default_table_path
    assert default_table_path.stat().st_mtime_ns == before


@pytest.mark.parametrize("seed", [5])
def test_default_table_sample(default_table: FkTable, seed: int) -> None:
    """A few queries on the real ~1M-row table (the brute side is slow, so only a few)."""
    rng = np.random.default_rng(seed)
    arc = load_arc(DEFAULT_PLACE_ARC)
    for _ in range(15):
        assert_same(
            default_table,
            {
                "phase": "pick",
                "target_xz": (float(rng.uniform(0.12, 0.26)), float(rng.uniform(0.18, 0.30))),
                "ee_y_min": 0.010,
                "ee_y_max": 0.040,
            },
        )
        t = (float(rng.uniform(-0.33, -0.05)), float(rng.uniform(0.10, 0.34)))
        assert_same(
            default_table,
            {
                "phase": "place_withblock",
                "target_xz": t,
                "ee_y_min": 0.07,
                "ee_y_max": 0.1,
                "ref_joints": list(j0_lookup(arc, t).angles),
                "joint_tol": 15.0,
                "ee_y_floor": 0.07,
            },
        )


@pytest.mark.slow
def test_every_descent_keeps_the_joint_continuity_bound(default_table: FkTable) -> None:
    """Over every pick and place cell with a valid approach (5 mm grid over the scenes'
    regions, docs/safety.md): each chosen descent moves no joint more than the bound, from
    the pose it starts at (the approach, or the hover above the block), and reaches every
    cell the unbounded lookup reaches; without the bound most pick descents swing > 30°."""
    from bench.continuity import cells, descent_jumps
    from mecharm.runtime.config import RuntimeSettings
    from mecharm.runtime.lookup.descent import pick_descent_table
    from mecharm.sim.scene import PICK_REACH_M, PICK_X, PICK_Z, PLACE_REACH_M, PLACE_X, PLACE_Z

    s = RuntimeSettings()
    bound = s.arm.joint_step_max_deg
    assert bound == 15.0
    arc_pick, arc_place = load_arc(DEFAULT_PICK_ARC), load_arc(DEFAULT_PLACE_ARC)
    picks = cells(PICK_X, PICK_Z, PICK_REACH_M)
    places = cells(PLACE_X, PLACE_Z, PLACE_REACH_M)
    n, before, _r, _h = descent_jumps(default_table, arc_pick, "pick", picks, 0.0, s)
    assert n > 300 and len(before) == n
    assert np.mean(np.asarray(before) > 30) > 0.5  # the problem this bound solves
    table = pick_descent_table(default_table, arc_pick)
    n_after, after, resid, hovers = descent_jumps(table, arc_pick, "pick", picks, bound, s)
    assert n_after == n and len(after) == n, "a pick cell lost its descent"
    assert max(after) <= bound
    assert hovers and max(resid) <= 12.0  # lands within the simulated grasp tolerance
    n, after, _r, _h = descent_jumps(default_table, arc_place, "place", places, bound, s)
    assert n > 200 and len(after) == n and max(after) <= bound
