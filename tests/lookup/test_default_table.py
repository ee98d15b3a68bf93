"""The default table and arcs serve the workcell's PICK and PLACE regions (the trial contract)."""

from __future__ import annotations

import numpy as np

from mecharm_runtime.lookup import FkTable, fk_lookup, j0_lookup, load_arc
from mecharm_runtime.lookup.j0 import DEFAULT_PICK_ARC, DEFAULT_PLACE_ARC


def grid(x0: float, x1: float, z0: float, z1: float) -> list[tuple[float, float]]:
    return [(float(x), float(z)) for x in np.arange(x0, x1 + 1e-9, 0.005) for z in np.arange(z0, z1 + 1e-9, 0.005)]


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
    # the rig's pick of the block at (0.20, 0.26)
    r = fk_lookup(default_table, "pick", (0.20, 0.26), 0.010, 0.040)
    assert r.distance < 0.003


def test_place_region(default_table: FkTable) -> None:
    arc = load_arc(DEFAULT_PLACE_ARC)
    d = []
    for t in grid(-0.24, -0.14, 0.14, 0.24):
        ap = j0_lookup(arc, t)
        assert ap.ok
        r = fk_lookup(default_table, "place_withblock", t, 0.070, 0.100, ref_joints=ap.angles, joint_tol=15.0,
                      ee_y_floor=0.070)
        if r.ok:
            assert r.max_dj <= 15.0 and r.selected_ee_y >= 0.070
        d.append(r.distance if r.ok else np.inf)
    d = np.array(d)
    # the ±15° box around the rig's approach_place pose reaches 0.24-0.29 m from the base axis only
    assert np.mean(d <= 0.010) >= 0.68
    # the rig's box position and the middle of the region are served within a few mm
    for t in ((-0.20, 0.18), (-0.19, 0.19), (-0.17, 0.20)):
        ap = j0_lookup(arc, t)
        r = fk_lookup(default_table, "place_withblock", t, 0.070, 0.100, ref_joints=ap.angles, joint_tol=15.0,
                      ee_y_floor=0.070)
        assert r.ok and r.distance < 0.005
