"""fk_lookup (SPEC §6): the table row nearest to a target in x-z under the safety filters.

Semantics kept from the rig: keep rows in the half-open ee_y band that pass the
joint limits and j1 <= 88°, and every optional band (j3, j5 within ``band_deg`` of
a reference; every joint within ``joint_tol`` of ``ref_joints``); choose the row
nearest in x-z (ties: lowest row number); ``out_of_range`` when no row is left
(naming the filter that emptied the set, with the count after each filter), when
the nearest is farther than ``dist_max``, or when its ee_y is below ``ee_y_floor``.
Where the rig silently dropped a malformed optional filter we raise ValueError.

Two methods give the same answer: ``brute`` (the rig's: mask every row, full
scan) is the reference; ``indexed`` (default) searches the grid cells around the
target first and falls back to the exact band scan only when nothing lies within
``dist_max``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from numbers import Real
from typing import Any

import numpy as np
from numpy.typing import NDArray

from mecharm_common.kinematics import JOINT_MAX, JOINT_MIN
from mecharm_runtime.lookup.table import J1_SAFE_MAX, FkTable

__all__ = ["FIRST_WINDOW_M", "METHODS", "PHASES", "FkLookupResult", "fk_lookup", "joint_violations"]

PHASES: tuple[str, ...] = ("approach_pick", "pick", "approach_place", "place_withblock", "place_noblock")
METHODS: tuple[str, ...] = ("indexed", "brute")
#: Half-width of the first, small search window of the indexed method (metres).
FIRST_WINDOW_M = 0.008


@dataclass(frozen=True)
class FkLookupResult:
    """Everything the rig's lookup reported; ``ok`` False means ``out_of_range``.

    Residuals are chosen (or nearest) row minus target, metres. ``counts`` (rows
    left after each applied filter) is filled for out_of_range results only.
    """

    ok: bool
    phase: str
    method: str
    target_xz: tuple[float, float]
    band: tuple[float, float]
    dist_max: float
    pose_id: str | None
    angles: tuple[float, ...] | None
    selected_index: int | None
    selected_ee_y: float | None
    resid_x: float | None
    resid_z: float | None
    distance: float | None
    nearest_index: int | None
    nearest_xyz: tuple[float, float, float] | None
    nearest_angles: tuple[float, ...] | None
    joint_limit_ok: bool
    violations: tuple[str, ...]
    j3_ref: float | None
    j5_ref: float | None
    band_deg: float
    ref_joints: tuple[float, ...] | None
    joint_tol: float | None
    max_dj: float | None
    ee_y_floor: float | None
    reason: str | None
    reason_code: str | None  # None | "no_candidates" | "too_far" | "below_floor"
    counts: dict[str, int] | None
    table_checksum: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (tuples as lists); ``from_dict`` gives back an equal result."""
        d = asdict(self)
        for k, v in d.items():
            if isinstance(v, tuple):
                d[k] = list(v)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FkLookupResult:
        names = {f.name for f in fields(cls)}
        missing = names - d.keys()
        if missing:
            raise ValueError(f"fk lookup record lacks {sorted(missing)}")
        kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items() if k in names}
        if kw["counts"] is not None:
            kw["counts"] = dict(kw["counts"])
        return cls(**kw)


@dataclass(frozen=True)
class _Query:
    phase: str
    tx: float
    tz: float
    y_lo: float
    y_hi: float
    dist_max: float
    j3_ref: float | None
    j5_ref: float | None
    band_deg: float
    ref: tuple[float, ...] | None
    tol: float | None
    floor: float | None


def _number(name: str, value: object, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{name} must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if positive and v <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return v


def _numbers(name: str, value: object, n: int) -> tuple[float, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)):
        raise ValueError(f"{name} must be a sequence of {n} numbers, got {value!r}")
    items = list(value)
    if len(items) != n:
        raise ValueError(f"{name} must have {n} values, got {len(items)}")
    return tuple(_number(f"{name}[{i}]", v) for i, v in enumerate(items))


def _validate(
    phase: object, target_xz: object, ee_y_min: object, ee_y_max: object, dist_max: object,
    j3_ref: object, j5_ref: object, band_deg: object, ref_joints: object, joint_tol: object,
    ee_y_floor: object,
) -> _Query:
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {', '.join(PHASES)}; got {phase!r}")
    tx, tz = _numbers("target_xz", target_xz, 2)
    lo = _number("ee_y_min", ee_y_min)
    hi = _number("ee_y_max", ee_y_max)
    if lo >= hi:
        raise ValueError(f"ee_y_min must be < ee_y_max, got [{lo}, {hi})")
    ref = None if ref_joints is None else _numbers("ref_joints", ref_joints, 6)
    if ref is not None and joint_tol is None:
        raise ValueError("joint_tol is required with ref_joints (the rig dropped the filter silently)")
    if ref is None and joint_tol is not None:
        raise ValueError("joint_tol given without ref_joints")
    return _Query(
        phase=str(phase), tx=tx, tz=tz, y_lo=lo, y_hi=hi,
        dist_max=_number("dist_max", dist_max, positive=True),
        j3_ref=None if j3_ref is None else _number("j3_ref", j3_ref),
        j5_ref=None if j5_ref is None else _number("j5_ref", j5_ref),
        band_deg=_number("band_deg", band_deg, positive=True),
        ref=ref, tol=None if joint_tol is None else _number("joint_tol", joint_tol, positive=True),
        floor=None if ee_y_floor is None else _number("ee_y_floor", ee_y_floor),
    )


def joint_violations(angles: Sequence[float]) -> tuple[str, ...]:
    """Human-readable list of SDK-limit and j1 <= 88° violations of one pose."""
    out = []
    for i, a in enumerate(angles):
        if a < JOINT_MIN[i]:
            out.append(f"j{i} {a:.2f} < {JOINT_MIN[i]:.0f} (SDK limit)")
        elif a > JOINT_MAX[i]:
            out.append(f"j{i} {a:.2f} > {JOINT_MAX[i]:.0f} (SDK limit)")
    if angles[1] > J1_SAFE_MAX:
        out.append(f"j1 {angles[1]:.2f} > {J1_SAFE_MAX:.0f} (firmware ignores the send above ~90.7)")
    return tuple(out)


# --- filters: the same element-wise expressions on the whole table or on a subset ---

def _filter_chain(table: FkTable, q: _Query, rows: NDArray[np.int64] | None) -> list[tuple[str, NDArray[np.bool_]]]:
    """Masks after safety, j3, j5, ref_joints (cumulative) over ``rows`` (None = all rows)."""
    def col(name: str) -> NDArray[Any]:
        c = table.col(name)
        return c if rows is None else c[rows]

    m = col("safe").copy()
    steps = [("safety", m.copy())]
    if q.j3_ref is not None:
        m &= np.abs(col("j3") - q.j3_ref) <= q.band_deg
        steps.append(("j3", m.copy()))
    if q.j5_ref is not None:
        m &= np.abs(col("j5") - q.j5_ref) <= q.band_deg
        steps.append(("j5", m.copy()))
    if q.ref is not None:
        joints = table.joints if rows is None else table.joints[rows]
        m &= np.abs(joints - np.asarray(q.ref)).max(axis=1) <= q.tol
        steps.append(("ref_joints", m.copy()))
    return steps


def _final_mask(table: FkTable, q: _Query, rows: NDArray[np.int64]) -> NDArray[np.bool_]:
    m = table.col("safe")[rows]
    if q.j3_ref is not None:
        m &= np.abs(table.col("j3")[rows] - q.j3_ref) <= q.band_deg
    if q.j5_ref is not None:
        m &= np.abs(table.col("j5")[rows] - q.j5_ref) <= q.band_deg
    if q.ref is not None:
        m &= np.abs(table.joints[rows] - np.asarray(q.ref)).max(axis=1) <= q.tol
    return m


def _d2(table: FkTable, q: _Query, rows: NDArray[np.int64] | None) -> NDArray[np.float64]:
    x = table.col("ee_x") if rows is None else table.col("ee_x")[rows]
    z = table.col("ee_z") if rows is None else table.col("ee_z")[rows]
    dx = x - q.tx
    dz = z - q.tz
    return dx * dx + dz * dz


def _scan(table: FkTable, q: _Query, rows: NDArray[np.int64] | None, n_band: int) -> tuple[int | None, dict[str, int]]:
    """Exact scan of ``rows`` (ascending; None = every row, band applied here)."""
    if rows is None:
        y = table.col("ee_y")
        band = (y >= q.y_lo) & (y < q.y_hi)
        counts = {"band": int(band.sum())}
        steps = [(name, m & band) for name, m in _filter_chain(table, q, None)]
    else:
        counts = {"band": n_band}
        steps = _filter_chain(table, q, rows)
    for name, m in steps:
        counts[name] = int(m.sum())
    final = steps[-1][1]
    if counts[steps[-1][0]] == 0:
        return None, counts
    if rows is None:
        d2 = np.where(final, _d2(table, q, None), np.inf)
        return int(np.argmin(d2)), counts
    cand = rows[final]
    return int(cand[np.argmin(_d2(table, q, cand))]), counts


def _brute(table: FkTable, q: _Query) -> tuple[int | None, dict[str, int] | None]:
    return _scan(table, q, None, 0)


def _indexed(table: FkTable, q: _Query) -> tuple[int | None, dict[str, int] | None]:
    idx = table.index
    for half in sorted({min(FIRST_WINDOW_M, q.dist_max), q.dist_max}):
        rows = idx.window_rows(q.tx, q.tz, half, q.y_lo, q.y_hi)
        if rows.size == 0:
            continue
        cand = rows[_final_mask(table, q, rows)]
        if cand.size == 0:
            continue
        d2 = _d2(table, q, cand)
        best = d2.min()
        if best <= half * half:  # every row outside the window is farther than ``half``
            return int(cand[d2 == best].min()), None
    rows = idx.band_rows(q.y_lo, q.y_hi)
    return _scan(table, q, rows, int(rows.size))


def _describe_counts(q: _Query, counts: dict[str, int]) -> str:
    label = {
        "band": f"ee_y band [{q.y_lo:.3f}, {q.y_hi:.3f})",
        "safety": "joint limits + j1<=88",
        "j3": f"j3 within {q.band_deg:g} of {q.j3_ref}",
        "j5": f"j5 within {q.band_deg:g} of {q.j5_ref}",
        "ref_joints": f"all joints within {q.tol} of ref_joints",
    }
    return "; ".join(f"{label[k]}: {v}" for k, v in counts.items())


def fk_lookup(
    table: FkTable,
    phase: str,
    target_xz: Sequence[float],
    ee_y_min: float,
    ee_y_max: float,
    *,
    dist_max: float = 0.030,
    j3_ref: float | None = None,
    j5_ref: float | None = None,
    band_deg: float = 5.0,
    ref_joints: Sequence[float] | None = None,
    joint_tol: float | None = None,
    ee_y_floor: float | None = None,
    method: str = "indexed",
) -> FkLookupResult:
    """Choose the table row for ``target_xz`` (SPEC §6); never raises for out_of_range.

    Raises ValueError naming the argument for: an unknown phase or method, a
    target that is not two finite numbers, ee_y_min >= ee_y_max, a non-numeric
    or non-finite j3_ref/j5_ref/ee_y_floor, band_deg/dist_max/joint_tol <= 0,
    ref_joints not six numbers, ref_joints without joint_tol or the reverse.
    """
    if not isinstance(table, FkTable):
        raise ValueError(f"table must be an FkTable, got {type(table).__name__}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
    q = _validate(phase, target_xz, ee_y_min, ee_y_max, dist_max, j3_ref, j5_ref, band_deg,
                  ref_joints, joint_tol, ee_y_floor)
    best, counts = _brute(table, q) if method == "brute" else _indexed(table, q)
    return _finish(table, q, best, counts, method)


def _finish(table: FkTable, q: _Query, best: int | None, counts: dict[str, int] | None,
            method: str) -> FkLookupResult:
    base: dict[str, Any] = dict(
        phase=q.phase, method=method, target_xz=(q.tx, q.tz), band=(q.y_lo, q.y_hi),
        dist_max=q.dist_max, j3_ref=q.j3_ref, j5_ref=q.j5_ref, band_deg=q.band_deg,
        ref_joints=q.ref, joint_tol=q.tol, ee_y_floor=q.floor, table_checksum=table.checksum,
    )
    if best is None:
        assert counts is not None
        emptied = next(k for k, v in counts.items() if v == 0)
        reason = f"out_of_range: no candidate left after the {emptied} filter ({_describe_counts(q, counts)})"
        return FkLookupResult(
            ok=False, pose_id=None, angles=None, selected_index=None, selected_ee_y=None,
            resid_x=None, resid_z=None, distance=None, nearest_index=None, nearest_xyz=None,
            nearest_angles=None, joint_limit_ok=False, violations=(), max_dj=None,
            reason=reason, reason_code="no_candidates", counts=counts, **base,
        )
    x, y, z = (float(v) for v in table.xyz[best])
    angles = tuple(float(v) for v in table.joints[best])
    dx = table.col("ee_x")[best] - q.tx
    dz = table.col("ee_z")[best] - q.tz
    dist = float(np.sqrt(dx * dx + dz * dz))
    violations = joint_violations(angles)
    max_dj = None if q.ref is None else float(max(abs(a - r) for a, r in zip(angles, q.ref, strict=True)))
    code, reason = None, None
    if dist > q.dist_max:
        code = "too_far"
        reason = f"out_of_range: nearest candidate is {dist * 1000:.1f} mm away > dist_max {q.dist_max * 1000:.1f} mm"
    elif q.floor is not None and y < q.floor:
        code = "below_floor"
        reason = f"out_of_range: chosen ee_y {y:.4f} is below ee_y_floor {q.floor:.4f}"
    ok = code is None
    if not ok:
        if counts is None:
            counts = _scan(table, q, table.index.band_rows(q.y_lo, q.y_hi),
                           table.index.band_count(q.y_lo, q.y_hi))[1]
        reason = f"{reason} ({_describe_counts(q, counts)})"
    return FkLookupResult(
        ok=ok, pose_id=f"fk_row_{best}" if ok else None, angles=angles if ok else None,
        selected_index=best if ok else None, selected_ee_y=y if ok else None,
        resid_x=float(dx), resid_z=float(dz), distance=dist, nearest_index=best,
        nearest_xyz=(x, y, z), nearest_angles=angles, joint_limit_ok=not violations,
        violations=violations, max_dj=max_dj, reason=reason, reason_code=code,
        counts=None if ok else counts, **base,
    )
