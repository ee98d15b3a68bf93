"""The hover pose of a continuous pick descent (docs/safety.md, "Joint continuity").

Why: the pick approach arc stands at one z (0.24 m) whatever the block's z, so for a
block 20-40 mm nearer the base no table row within reach of the block keeps every joint
within the continuity bound of the approach pose: the descent would have to swing the
arm sideways and down at once. The careful move is to stand above the block first, at
approach height, then descend with a bounded joint change. ``pick_hover`` finds that
hover pose: a row in the hover band whose tip is within ``hover_dist_max`` of the
block in x-z and that has a pick row within the bound below it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from mecharm.runtime.lookup.build import with_approach_lattices
from mecharm.runtime.lookup.fk_lookup import FkLookupResult, fk_lookup
from mecharm.runtime.lookup.j0 import ArcPose
from mecharm.runtime.lookup.table import FkTable

__all__ = ["MAX_CANDIDATES", "PickDescent", "pick_descent_table", "pick_hover", "plan_pick_descent"]

#: Pick rows tried (nearest to the block first) before giving up.
MAX_CANDIDATES = 300
#: A landing this near the aim ends the search (the camera's own error is about this).
GOOD_LANDING_M = 0.001


def pick_descent_table(table: FkTable, arc_pick: ArcPose) -> FkTable:
    """The table a bounded pick searches: ``table`` plus ±15° lattices around the pick arc's
    poses (docs/safety.md); without them no row within reach of a pick target is within the
    bound of the approach pose. Built once per table and arc (cached), so the service builds
    it at start, not in the first trial's descend_pick."""
    j0s = [p[2] for p in arc_pick.points]
    return with_approach_lattices(table, arc_pick.base, (min(j0s), max(j0s)))


def pick_hover(
    table: FkTable,
    target_xz: Sequence[float],
    pick_band: tuple[float, float],
    hover_band: tuple[float, float],
    *,
    dist_max: float,
    hover_dist_max: float,
    step_max: float,
    reachable: Callable[[Sequence[float]], bool] | None = None,
) -> FkLookupResult | None:
    """The hover lookup (phase ``approach_pick``) for ``target_xz``, or None when none of
    the ``MAX_CANDIDATES`` hover rows nearest to the target (within ``hover_dist_max``)
    has a pick row within ``dist_max`` of the target and within ``step_max`` on every joint.

    The hover whose bounded descent lands nearest the target wins (the first, in order
    of x-z distance then row number, to land within ``GOOD_LANDING_M`` ends the search):
    deterministic, and as accurate as the table allows, so the correction memory learns
    the camera's error and not the table's spacing. ``reachable`` (the path check from
    where the arm is) skips a hover the arm cannot move to: some hover rows turn the wrist
    60° and the straight joint path there dips the tool to the mat.
    """
    tx, tz = float(target_xz[0]), float(target_xz[1])
    rows = table.index.band_rows(*hover_band)
    rows = rows[table.col("safe")[rows]]
    d2 = (table.col("ee_x")[rows] - tx) ** 2 + (table.col("ee_z")[rows] - tz) ** 2
    near = d2 <= hover_dist_max * hover_dist_max
    rows, d2 = rows[near], d2[near]
    best: tuple[float, int] | None = None  # (landing distance, hover row)
    for r in rows[np.lexsort((rows, d2))[:MAX_CANDIDATES]]:
        pick = fk_lookup(
            table,
            "pick",
            (tx, tz),
            pick_band[0],
            pick_band[1],
            dist_max=dist_max,
            step_ref=tuple(table.joints[r].tolist()),
            step_max=step_max,
        )
        if pick.ok and (best is None or (pick.distance or 0.0) < best[0]):
            if reachable is not None and not reachable(tuple(table.joints[r].tolist())):
                continue
            best = (pick.distance or 0.0, int(r))
            if best[0] <= GOOD_LANDING_M:
                break
    if best is not None:
        # the hover row's own lookup record (a joint box of 1e-9° holds just it)
        return fk_lookup(
            table,
            "approach_pick",
            (tx, tz),
            hover_band[0],
            hover_band[1],
            dist_max=hover_dist_max,
            ref_joints=tuple(table.joints[best[1]].tolist()),
            joint_tol=1e-9,
        )
    return None


@dataclass(frozen=True)
class PickDescent:
    """The pick lookups under the continuity bound: the direct descent from the approach
    pose, and when that lands too far, the hover pose and the descent from it."""

    direct: FkLookupResult
    hover: FkLookupResult | None = None
    from_hover: FkLookupResult | None = None

    @property
    def use_hover(self) -> bool:
        p = self.from_hover
        if self.hover is None or p is None or not p.ok:
            return False
        return not self.direct.ok or (p.distance or 0.0) < (self.direct.distance or 0.0)

    @property
    def pick(self) -> FkLookupResult:
        """The lookup to descend with."""
        if self.use_hover:
            assert self.from_hover is not None
            return self.from_hover
        return self.direct


def plan_pick_descent(
    table: FkTable,
    aim_xz: Sequence[float],
    approach: Sequence[float],
    *,
    pick_band: tuple[float, float],
    hover_band: tuple[float, float],
    dist_max: float,
    hover_dist_max: float,
    resid_max: float,
    step_max: float,
    reachable: Callable[[Sequence[float]], bool] | None = None,
) -> PickDescent:
    """Direct descent if it lands within ``resid_max`` of the aim; else look for a hover
    pose (an accurate landing, ``resid_max``, first; then any within ``dist_max``) and
    descend from it when that lands nearer than the direct descent. ``reachable``: as
    for ``pick_hover``."""
    lo, hi = pick_band
    direct = fk_lookup(
        table, "pick", aim_xz, lo, hi, dist_max=dist_max, step_ref=approach, step_max=step_max
    )
    if direct.ok and (direct.distance or 0.0) <= resid_max:
        return PickDescent(direct)
    for reach in (resid_max, dist_max):
        hover = pick_hover(
            table,
            aim_xz,
            pick_band,
            hover_band,
            dist_max=reach,
            hover_dist_max=hover_dist_max,
            step_max=step_max,
            reachable=reachable,
        )
        if hover is not None and hover.angles is not None:
            pick = fk_lookup(
                table, "pick", aim_xz, lo, hi, dist_max=dist_max,
                step_ref=hover.angles, step_max=step_max,
            )  # fmt: skip
            return PickDescent(direct, hover, pick)
    return PickDescent(direct)
