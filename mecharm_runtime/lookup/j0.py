"""Adopted approach poses (SPEC §6): a fixed base j1..j5 plus an arc (x, z) -> j0.

On the rig the arc was 20 detected (x, z) positions with the j0 commanded for
each; j0 for a new target is interpolated linearly by x between the two arc
points around it, so the x residual is 0 and the z residual (arc z at that x
minus target z) is reported. ``adopt_arc`` generates such an arc from the
kinematic model: points along a line of constant z, each with the j0 that turns
the base pose's tip onto the point's bearing from the base axis.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from mecharm_common.fsutil import atomic_write_json
from mecharm_common.kinematics import JOINT_MAX, JOINT_MIN, TOOL_OFFSET_M, fk_tip
from mecharm_runtime.lookup.fk_lookup import PHASES, _numbers, joint_violations

__all__ = ["ARC_POINTS", "ArcPose", "J0LookupResult", "adopt_arc", "bearing_deg", "j0_lookup", "load_arc",
           "save_arc"]

ARC_POINTS = 20


def bearing_deg(x: float, z: float) -> float:
    """Bearing of (x, z) around the base axis: 0 along +z, positive toward -x (as j0)."""
    return math.degrees(math.atan2(-x, z))


@dataclass(frozen=True)
class ArcPose:
    """An adopted pose: ``base`` = j1..j5, ``points`` = ((x, z, j0), ...) sorted by x."""

    name: str
    phase: str
    base: tuple[float, ...]
    points: tuple[tuple[float, float, float], ...]
    source: str = ""

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"arc {self.name}: phase must be one of {', '.join(PHASES)}; got {self.phase!r}")
        if len(self.base) != 5:
            raise ValueError(f"arc {self.name}: base must be j1..j5 (5 values), got {len(self.base)}")
        if len(self.points) < 2:
            raise ValueError(f"arc {self.name}: needs at least 2 points, got {len(self.points)}")
        xs = [p[0] for p in self.points]
        if any(b <= a for a, b in zip(xs, xs[1:], strict=False)):
            raise ValueError(f"arc {self.name}: point x values must be strictly increasing")

    @property
    def x_range(self) -> tuple[float, float]:
        return self.points[0][0], self.points[-1][0]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "phase": self.phase, "base_j1_j5": list(self.base),
                "points": [{"x": x, "z": z, "j0": j0} for x, z, j0 in self.points], "source": self.source}


def _parse_arc(data: object, where: str) -> ArcPose:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: top level must be an object")
    for key in ("name", "phase", "base_j1_j5", "points"):
        if key not in data:
            raise ValueError(f"{where}: missing key {key!r}")
    if not isinstance(data["name"], str) or not isinstance(data["phase"], str):
        raise ValueError(f"{where}: name and phase must be strings")
    base = _numbers(f"{where}: base_j1_j5", data["base_j1_j5"], 5)
    pts_raw = data["points"]
    if not isinstance(pts_raw, list):
        raise ValueError(f"{where}: points must be a list")
    pts = []
    for i, p in enumerate(pts_raw):
        if not isinstance(p, dict) or set(p) != {"x", "z", "j0"}:
            raise ValueError(f"{where}: points[{i}] must be an object with keys x, z, j0")
        pts.append(_numbers(f"{where}: points[{i}]", [p["x"], p["z"], p["j0"]], 3))
    pts.sort(key=lambda p: p[0])
    return ArcPose(name=data["name"], phase=data["phase"], base=base,
                   points=tuple(tuple(p) for p in pts),  # type: ignore[misc]
                   source=str(data.get("source", "")))


def load_arc(path: Path | str) -> ArcPose:
    """Read an adopted pose file; raise ValueError naming the file and the bad key."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"arc file {path}: cannot read: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"arc file {path}: not valid JSON: {exc}") from None
    try:
        return _parse_arc(data, f"arc file {path}")
    except ValueError as exc:
        raise ValueError(str(exc) if str(exc).startswith("arc file") else f"arc file {path}: {exc}") from None


def save_arc(path: Path | str, arc: ArcPose) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(Path(path), arc.to_dict())


def adopt_arc(name: str, phase: str, base: Sequence[float], x_range: tuple[float, float], z: float,
              n_points: int = ARC_POINTS, tool_m: float = TOOL_OFFSET_M) -> ArcPose:
    """Arc of ``n_points`` points at x evenly over ``x_range`` and constant ``z``.

    Each point's j0 turns the base pose's tip onto the point's bearing: j0 =
    bearing(point) - bearing(tip at j0 = 0) (j0 turns everything about the base axis).
    """
    base_t = _numbers("base", base, 5)
    if n_points < 2:
        raise ValueError(f"n_points must be >= 2, got {n_points}")
    x_lo, x_hi = x_range
    if not x_lo < x_hi:
        raise ValueError(f"x_range must be increasing, got {x_range}")
    tip0 = fk_tip([0.0, *base_t], tool_m)
    offset = bearing_deg(float(tip0[0]), float(tip0[2]))
    pts = []
    for x in np.linspace(x_lo, x_hi, n_points):
        j0 = round(bearing_deg(float(x), z) - offset, 3)
        if not JOINT_MIN[0] <= j0 <= JOINT_MAX[0]:
            raise ValueError(f"arc point x={x:.3f} needs j0={j0} outside the joint limits")
        pts.append((round(float(x), 6), round(float(z), 6), j0))
    src = f"mecharm fk adopt-arc: kinematic model, tool {tool_m} m, bearing offset {offset:.3f} deg"
    return ArcPose(name=name, phase=phase, base=base_t, points=tuple(pts), source=src)


@dataclass(frozen=True)
class J0LookupResult:
    """j0 interpolated on an arc. Residuals are arc point minus target, metres."""

    ok: bool
    phase: str
    pose_name: str
    target_xz: tuple[float, float]
    angles: tuple[float, ...]
    j0: float
    resid_x: float
    resid_z: float
    segment: int
    t: float
    joint_limit_ok: bool
    violations: tuple[str, ...]
    reason: str | None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> J0LookupResult:
        names = {f.name for f in fields(cls)}
        if names - d.keys():
            raise ValueError(f"j0 lookup record lacks {sorted(names - d.keys())}")
        return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items() if k in names})


def j0_lookup(arc: ArcPose, target_xz: Sequence[float]) -> J0LookupResult:
    """Interpolate j0 by x on ``arc``; out of the arc's x range -> ok False (clamped end).

    Raises ValueError when ``target_xz`` is not two finite numbers.
    """
    if not isinstance(arc, ArcPose):
        raise ValueError(f"arc must be an ArcPose, got {type(arc).__name__}")
    tx, tz = _numbers("target_xz", target_xz, 2)
    pts = arc.points
    xs = [p[0] for p in pts]
    reason = None
    in_range = xs[0] <= tx <= xs[-1]
    if not in_range:
        seg = 0 if tx < xs[0] else len(pts) - 2
        t = 0.0 if tx < xs[0] else 1.0
        reason = f"out_of_range: target x {tx:.4f} outside the arc's x range [{xs[0]:.4f}, {xs[-1]:.4f}]"
    else:
        seg = max(0, min(int(np.searchsorted(xs, tx, side="right")) - 1, len(pts) - 2))
        t = (tx - xs[seg]) / (xs[seg + 1] - xs[seg])
    (x0, z0, a0), (x1, z1, a1) = pts[seg], pts[seg + 1]
    j0 = a0 + t * (a1 - a0)
    x_arc = x0 + t * (x1 - x0)
    z_arc = z0 + t * (z1 - z0)
    angles = (float(j0), *arc.base)
    violations = joint_violations(angles)
    if violations and reason is None:
        reason = "joint limits: " + "; ".join(violations)
    return J0LookupResult(
        ok=reason is None, phase=arc.phase, pose_name=arc.name, target_xz=(tx, tz), angles=angles,
        j0=float(j0), resid_x=0.0 if in_range else float(x_arc - tx), resid_z=float(z_arc - tz),
        segment=seg, t=float(t), joint_limit_ok=not violations, violations=violations, reason=reason,
    )
