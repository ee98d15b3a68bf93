"""Joint-continuity figures of docs/safety.md: ``python -m bench.continuity [--data-dir DIR]``.

For every pick and place cell (5 mm grid over the simulator's PICK and PLACE regions,
inside the reach the scenes use) with a valid approach pose, the largest single-joint
change from the approach pose to the descent pose the lookup chooses: before (the pick
lookup with no joint bound, the default table) and after (the bound of
``joint_step_max_deg``, the table with the approach lattices, as descend_pick uses it).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.lookup import ensure_table, fk_lookup, j0_lookup, load_arc, load_table
from mecharm.runtime.lookup.descent import pick_descent_table, plan_pick_descent
from mecharm.runtime.lookup.j0 import DEFAULT_PICK_ARC, DEFAULT_PLACE_ARC, ArcPose
from mecharm.runtime.lookup.table import FkTable
from mecharm.sim.scene import PICK_REACH_M, PICK_X, PICK_Z, PLACE_REACH_M, PLACE_X, PLACE_Z

__all__ = ["cells", "descent_jumps", "main", "summary"]

GRID_M = 0.005


def cells(
    xs: tuple[float, float], zs: tuple[float, float], reach: tuple[float, float]
) -> list[tuple[float, float]]:
    out = []
    for x in np.arange(xs[0], xs[1] + 1e-9, GRID_M):
        for z in np.arange(zs[0], zs[1] + 1e-9, GRID_M):
            if reach[0] <= float(np.hypot(x, z)) <= reach[1]:
                out.append((round(float(x), 4), round(float(z), 4)))
    return out


def descent_jumps(
    table: FkTable,
    arc: ArcPose,
    phase: str,
    targets: list[tuple[float, float]],
    bound: float,
    s: RuntimeSettings,
) -> tuple[int, list[float], list[float], list[float]]:
    """(cells with a valid approach, max single-joint change of each chosen descent from the
    pose it starts at, landing residual mm of each, the approach -> hover swing of each
    cell that needed a hover pose)."""
    n, jumps, resid, hovers = 0, [], [], []
    for xz in targets:
        ap = j0_lookup(arc, xz)
        if not ap.ok or (phase == "pick" and abs(ap.resid_x) > s.pick_place.x_resid_thresh_m):
            continue
        n += 1
        if phase == "pick" and bound:
            plan = plan_pick_descent(
                table, xz, ap.angles, pick_band=s.pick_place.pick_band, hover_band=s.pick_place.pick_hover_band,
                dist_max=s.pick_place.dist_max_m, hover_dist_max=s.pick_place.pick_hover_dist_m,
                resid_max=s.pick_place.pick_resid_max_m, step_max=bound,
            )  # fmt: skip
            r, start = plan.pick, ap.angles
            if plan.use_hover:
                assert plan.hover is not None and plan.hover.angles is not None
                start = plan.hover.angles
                hovers.append(float(np.max(np.abs(np.subtract(start, ap.angles)))))
        elif phase == "pick":
            r = fk_lookup(
                table, "pick", xz, *s.pick_place.pick_band, dist_max=s.pick_place.dist_max_m
            )
            start = ap.angles
        else:
            step = {"step_ref": ap.angles, "step_max": bound} if bound else {}
            r = fk_lookup(
                table, "place_withblock", xz, *s.pick_place.place_band, dist_max=s.pick_place.dist_max_m,
                ref_joints=ap.angles, joint_tol=s.pick_place.place_joint_tol, ee_y_floor=s.pick_place.place_floor_m, **step,
            )  # fmt: skip
            start = ap.angles
        if r.ok and r.angles is not None:
            jumps.append(float(np.max(np.abs(np.subtract(r.angles, start)))))
            resid.append(float(r.distance or 0.0) * 1000.0)
    return n, jumps, resid, hovers


def summary(n: int, jumps: list[float], resid: list[float], hovers: list[float]) -> dict[str, Any]:
    j = np.asarray(jumps)
    if j.size == 0:
        return {"cells_with_approach": n, "reachable": 0}
    return {
        "cells_with_approach": n,
        "reachable": int(j.size),
        "via_hover": len(hovers),
        # the move approach -> hover, at hover height (not near the work, path-checked)
        "hover_swing_median_deg": round(float(np.median(hovers)), 1) if hovers else None,
        "hover_swing_max_deg": round(float(np.max(hovers)), 1) if hovers else None,
        "median_deg": round(float(np.median(j)), 1),
        "p90_deg": round(float(np.percentile(j, 90)), 1),
        "max_deg": round(float(j.max()), 1),
        "pct_over_30": round(100.0 * float((j > 30).mean()), 1),
        "resid_median_mm": round(float(np.median(resid)), 1),
        "resid_max_mm": round(float(np.max(resid)), 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.continuity", description=__doc__)
    p.add_argument(
        "--data-dir",
        type=Path,
        help="the FK data directory (the default table is built there if missing)",
    )
    args = p.parse_args(argv)
    s = RuntimeSettings()
    bound = s.arm.joint_step_max_deg
    data = args.data_dir or Path(tempfile.mkdtemp(prefix="mecharm_continuity_"))
    table = load_table(ensure_table(data), j1_max=s.arm.j1_max)
    arc_pick, arc_place = load_arc(DEFAULT_PICK_ARC), load_arc(DEFAULT_PLACE_ARC)
    picks = cells(PICK_X, PICK_Z, PICK_REACH_M)
    places = cells(PLACE_X, PLACE_Z, PLACE_REACH_M)
    out = {
        "bound_deg": bound,
        "pick_before": summary(*descent_jumps(table, arc_pick, "pick", picks, 0.0, s)),
        "pick_after": summary(
            *descent_jumps(pick_descent_table(table, arc_pick), arc_pick, "pick", picks, bound, s)
        ),
        "place_before": summary(*descent_jumps(table, arc_place, "place", places, 0.0, s)),
        "place_after": summary(*descent_jumps(table, arc_place, "place", places, bound, s)),
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
