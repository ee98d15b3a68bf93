"""The path check: the joint-space path a move will take stays clear of the mat and the box.

Why the path and not only the end pose: the firmware interpolates every joint linearly
from where the arm is to the target, so two safe end poses can have a path between
them that dips below the mat or sweeps through a box wall (docs/safety.md, "Path check").
The check samples that straight joint-space segment every ``step_deg`` of the largest
joint change and puts every sample through the forward kinematics in one vectorised
call (``fk_wrist_tip``): the tool tip and the wrist (flange) of each sample must stay

- above the mat plus ``mat_margin_m`` (y is height above the mat, docs/kinematics.md);
- outside the box: detection gives the box centre but not its yaw, so the box is the
  yaw-free cylinder that holds it whatever its yaw (radius = half the outer diagonal)
  up to its rim, both grown by ``box_margin_m``. A move marked ``into_box`` (placing)
  may enter the cylinder that fits inside the walls whatever the yaw (radius = half the
  inner side, minus the margin).

A path whose first sample (where the arm is now) already breaks a rule is judged by its
target alone: refusing to leave would keep the arm where it must not be.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from mecharm.common.kinematics import fk_wrist_tip

__all__ = ["POINTS", "PathVerdict", "Workspace", "check_path", "sample_path"]

#: Names of the points tested on each sample, in ``fk_wrist_tip`` order.
POINTS: tuple[str, ...] = ("wrist", "tip")


@dataclass(frozen=True)
class Workspace:
    """What the path must keep clear of: the mat plane and (when detected) the box."""

    mat_margin_m: float = 0.005
    box_xz: tuple[float, float] | None = None
    box_inner_m: float = 0.070
    box_wall_m: float = 0.004
    box_height_m: float = 0.043
    box_margin_m: float = 0.005

    @property
    def box_outer_radius_m(self) -> float:
        """Radius of the cylinder that holds the box whatever its yaw, plus the margin."""
        half_outer = self.box_inner_m / 2.0 + self.box_wall_m
        return half_outer * math.sqrt(2.0) + self.box_margin_m

    @property
    def box_inner_radius_m(self) -> float:
        """Radius of the cylinder inside the walls whatever the yaw, minus the margin."""
        return self.box_inner_m / 2.0 - self.box_margin_m

    @property
    def box_top_m(self) -> float:
        return self.box_height_m + self.box_margin_m


@dataclass(frozen=True)
class PathVerdict:
    ok: bool
    reason: str
    samples: int
    sample: int | None = None  # index of the first offending sample (0 = the start pose)
    point: str | None = None  # "tip" or "wrist"
    xyz: tuple[float, float, float] | None = None
    obstacle: str | None = None  # "mat" | "box"
    angles: tuple[float, ...] | None = None  # the offending sample's joints

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "reason": self.reason,
            "samples": self.samples,
            "sample": self.sample,
            "point": self.point,
            "xyz": None if self.xyz is None else list(self.xyz),
            "obstacle": self.obstacle,
            "angles": None if self.angles is None else list(self.angles),
        }


def sample_path(
    start: Sequence[float], target: Sequence[float], step_deg: float = 1.0
) -> NDArray[np.float64]:
    """(n, 6) joint samples of the straight joint-space segment, start and target included,
    no two consecutive samples more than ``step_deg`` apart on any joint."""
    a = np.asarray(start, dtype=np.float64)
    b = np.asarray(target, dtype=np.float64)
    span = float(np.max(np.abs(b - a)))
    n = max(2, math.ceil(span / step_deg) + 1)
    t = np.linspace(0.0, 1.0, n)[:, None]
    return a + t * (b - a)


def _offending(
    pts: NDArray[np.float64], ws: Workspace, into_box: bool
) -> tuple[NDArray[np.bool_], NDArray[np.int64]]:
    """(n, 2) mask of points breaking a rule, and (n, 2) obstacle codes (1 mat, 2 box)."""
    y = pts[..., 1]
    bad_mat = y < ws.mat_margin_m
    if ws.box_xz is None:
        return bad_mat, np.where(bad_mat, 1, 0)
    dx = pts[..., 0] - ws.box_xz[0]
    dz = pts[..., 2] - ws.box_xz[1]
    r2 = dx * dx + dz * dz
    ro = ws.box_outer_radius_m
    bad_box = (r2 <= ro * ro) & (y < ws.box_top_m)
    if into_box:
        ri = ws.box_inner_radius_m
        bad_box &= ~((ri > 0) & (r2 < ri * ri))
    return bad_mat | bad_box, np.where(bad_mat, 1, np.where(bad_box, 2, 0))


def check_path(
    start: Sequence[float],
    target: Sequence[float],
    ws: Workspace,
    *,
    into_box: bool = False,
    step_deg: float = 1.0,
) -> PathVerdict:
    """Verdict on the move ``start`` -> ``target`` (joint degrees); never raises on a bad path."""
    q = sample_path(start, target, step_deg)
    pts = fk_wrist_tip(q)  # (n, 2, 3)
    bad, code = _offending(pts, ws, into_box)
    n = q.shape[0]
    leaving = bool(bad[0].any())
    if leaving:  # the arm is already where it must not be: judge only where it goes
        bad[:-1] = False
    hits = np.flatnonzero(bad.any(axis=1))
    if hits.size == 0:
        why = (
            "clear (start already inside an obstacle: target checked only)" if leaving else "clear"
        )
        return PathVerdict(True, why, n)
    i = int(hits[0])
    k = int(np.flatnonzero(bad[i])[0])
    x, y, z = (float(v) for v in pts[i, k])
    obstacle = "mat" if code[i, k] == 1 else "box"
    if obstacle == "mat":
        rule = f"below the mat margin (y {y * 1000:.1f} mm < {ws.mat_margin_m * 1000:.1f} mm)"
    else:
        assert ws.box_xz is not None
        r = math.hypot(x - ws.box_xz[0], z - ws.box_xz[1])
        rule = (
            f"inside the box at ({ws.box_xz[0]:.3f}, {ws.box_xz[1]:.3f}) "
            f"({r * 1000:.1f} mm from its centre, y {y * 1000:.1f} mm < rim+margin "
            f"{ws.box_top_m * 1000:.1f} mm{'' if not into_box else ', outside the inner opening'})"
        )
    angles = tuple(round(float(v), 3) for v in q[i])
    reason = (
        f"path sample {i}/{n - 1} {list(angles)}: {POINTS[k]} at "
        f"({x:.3f}, {y:.3f}, {z:.3f}) is {rule}"
    )
    return PathVerdict(False, reason, n, i, POINTS[k], (x, y, z), obstacle, angles)
