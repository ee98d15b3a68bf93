"""Path-check benchmark: the vectorised check (mecharm/runtime/pathcheck.py) against the same
check done sample by sample with the scalar ``fk_tip`` (plus the flange from ``fk_frames``).

The moves are the trial's own: HOME -> approach_pick, approach -> pick descent,
lift -> approach_place, the place descent, the swept retreat (j0 = 85°), back HOME.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from bench import Row, has
from mecharm.common.kinematics import fk_frames, fk_tip
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.lookup import j0_lookup, load_arc
from mecharm.runtime.lookup.j0 import DEFAULT_PICK_ARC, DEFAULT_PLACE_ARC
from mecharm.runtime.pathcheck import Workspace, check_path, sample_path

__all__ = ["moves", "run", "scalar_check"]


def moves() -> list[tuple[tuple[float, ...], tuple[float, ...], bool]]:
    """(start, target, into_box) of one trial's moves on a typical scene."""
    s = RuntimeSettings()
    ap = tuple(j0_lookup(load_arc(DEFAULT_PICK_ARC), (0.19, 0.24)).angles)
    pl = tuple(j0_lookup(load_arc(DEFAULT_PLACE_ARC), (-0.19, 0.19)).angles)
    pick = (ap[0], ap[1] - 10.0, ap[2] + 15.0, ap[3], ap[4] + 10.0, ap[5])
    place = (pl[0], pl[1] + 10.0, pl[2] - 5.0, pl[3], pl[4] + 10.0, pl[5])
    swept = (s.pick_place.swept_j0, *pl[1:])
    home = tuple(s.arm.home)
    return [
        (home, ap, False),
        (ap, pick, False),
        (pick, ap, False),
        (ap, pl, False),
        (pl, place, True),
        (place, pl, False),
        (pl, swept, False),
        (swept, pl, False),
        (pl, home, False),
    ]


def scalar_check(
    start: tuple[float, ...], target: tuple[float, ...], ws: Workspace, into_box: bool, step: float
) -> bool:
    """The baseline: the same samples and rules, one pose at a time through ``fk_tip``."""
    q = sample_path(start, target, step)
    bx, bz = ws.box_xz if ws.box_xz is not None else (math.inf, math.inf)
    ro, ri, top = ws.box_outer_radius_m, ws.box_inner_radius_m, ws.box_top_m
    for i in range(1, q.shape[0]):
        pose = q[i]
        for p in (fk_frames(pose)[6], fk_tip(pose)):
            x, y, z = float(p[0]), float(p[1]), float(p[2])
            if y < ws.mat_margin_m:
                return False
            r = math.hypot(x - bx, z - bz)
            if r <= ro and y < top and not (into_box and r < ri):
                return False
    return True


def run(quick: bool = False) -> dict[str, Any]:
    s = RuntimeSettings()
    ws = Workspace(mat_margin_m=s.arm.path_mat_margin_m, box_xz=(-0.19, 0.19))
    mv = moves()
    reps = 20 if quick else 200
    for a, b, inside in mv:  # both agree on every move of the trial
        v = check_path(a, b, ws, into_box=inside, step_deg=s.arm.path_sample_deg)
        assert v.ok == scalar_check(a, b, ws, inside, s.arm.path_sample_deg), (a, b)
    samples = [sample_path(a, b, s.arm.path_sample_deg).shape[0] for a, b, _ in mv]
    t0 = time.perf_counter()
    for _ in range(reps):
        for a, b, inside in mv:
            check_path(a, b, ws, into_box=inside, step_deg=s.arm.path_sample_deg)
    vec = (time.perf_counter() - t0) / (reps * len(mv))
    sreps = max(2, reps // 20)
    t0 = time.perf_counter()
    for _ in range(sreps):
        for a, b, inside in mv:
            scalar_check(a, b, ws, inside, s.arm.path_sample_deg)
    scal = (time.perf_counter() - t0) / (sreps * len(mv))
    return {
        "moves": len(mv),
        "samples_per_move_median": int(np.median(samples)),
        "samples_per_move_max": int(max(samples)),
        "vectorised_us_per_move": round(vec * 1e6, 1),
        "scalar_us_per_move": round(scal * 1e6, 1),
        "speedup": round(scal / vec, 1),
    }


def rows(result: dict[str, Any]) -> list[Row]:
    """The table's line: the vectorised check per move against the scalar one."""
    r = result
    if not has(r, "vectorised_us_per_move", "scalar_us_per_move"):
        return []
    return [
        Row(
            "path check",
            f"per move of a trial ({r.get('moves', '?')} moves, "
            f"{r.get('samples_per_move_median', '?')} samples at the median)",
            f"{r['vectorised_us_per_move']:,} µs",
            "—",
            f"sample by sample with the scalar `fk_tip` {r['scalar_us_per_move']:,} µs "
            f"({r.get('speedup', '?')}x)",
        )
    ]
