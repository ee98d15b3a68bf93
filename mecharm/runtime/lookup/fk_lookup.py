"""fk_lookup (docs/lookup.md): the table row nearest to a target in x-z under the safety filters.

Semantics kept from the rig: keep rows in the half-open ee_y band that pass the
joint limits and j1 <= the table's ``j1_max`` (88° unless configured lower), and every optional band (j3, j5 within ``band_deg`` of
a reference; every joint within ``joint_tol`` of ``ref_joints``); choose the row
nearest in x-z (ties: lowest row number); ``out_of_range`` when no row is left
(naming the filter that emptied the set, with the count after each filter), when
the nearest is farther than ``dist_max``, or when its ee_y is below ``ee_y_floor``.
Where the rig silently dropped a malformed optional filter we raise ValueError.

Three methods give the same answer: ``rig`` (the rig's own: a vectorised ee_y band
filter, the other filters on the band's rows, then the nearest in x-z among them) is the
speed baseline; ``brute`` (every filter as a mask over every row, full scan) is the
independent reference the others are checked against; ``indexed`` (default) searches the grid cells around the
target first and falls back to the exact band scan only when nothing lies within
``dist_max``. A band used more than once is searched through its ``BandView``
(safe rows of the band in grid order, see index.py); a one-off band through the
whole-table grid index. At ~0.05 ms a call the fixed per-call costs matter as
much as the search, so the hot path avoids re-validating what is already clean
and builds the result without the frozen dataclass's per-field ``__setattr__``.

One concern: one lookup, its query validation, its three search methods (kept equal by
tests) and the explanation of a miss, over one ``_Query``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from numbers import Real
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from mecharm.common.kinematics import JOINT_MAX, JOINT_MIN
from mecharm.runtime.lookup.index import BandView, FkIndex
from mecharm.runtime.lookup.table import J1_SAFE_MAX, FkTable

__all__ = ["METHODS", "PHASES", "WINDOWS_M", "FkLookupResult", "fk_lookup", "joint_violations"]

PHASES: tuple[str, ...] = (
    "approach_pick",
    "pick",
    "approach_place",
    "place_withblock",
    "place_noblock",
)
METHODS: tuple[str, ...] = ("indexed", "brute", "rig")
#: Half-widths of the search windows tried (below dist_max) before the dist_max window.
WINDOWS_M: tuple[float, ...] = (0.003, 0.006, 0.012)
#: Candidates tested per round, nearest first (the last round takes the rest).
_CHUNKS: tuple[int, ...] = (64, 1024, 1 << 62)
#: Up to this many band-view rows the ref_joints test runs as one (6, k) block.
_BLOCK_MAX = 1024


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
    reason_code: str | None  # None | "no_candidates" | "too_far" | "below_floor" | "joint_step"
    counts: dict[str, int] | None
    table_checksum: str
    #: the joint-continuity bound (docs/safety.md): every joint of the chosen row within
    #: ``step_max`` degrees of ``step_ref``. Left out of ``to_dict`` when not used, so the
    #: records of lookups without it are the same as before it existed.
    step_ref: tuple[float, ...] | None = None
    step_max: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (tuples as lists); ``from_dict`` gives back an equal result."""
        d = {f: getattr(self, f) for f in _FIELDS}
        for f in _OPTIONAL:
            if d[f] is None:
                del d[f]
        for k, v in d.items():
            if isinstance(v, tuple):
                d[k] = list(v)
            elif isinstance(v, dict):
                d[k] = dict(v)
        return d

    @classmethod
    def _of(cls, fields_: dict[str, Any]) -> FkLookupResult:
        """Build from a dict of every field without the generated ``__init__``: a frozen
        dataclass sets each of its 29 fields through ``object.__setattr__`` (~8 us, as
        long as the whole search). Equality, repr and ``to_dict`` are unaffected."""
        obj = object.__new__(cls)
        obj.__dict__.update(fields_)
        return obj

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FkLookupResult:
        names = {f.name for f in fields(cls)}
        missing = names - d.keys() - set(_OPTIONAL)
        if missing:
            raise ValueError(f"fk lookup record lacks {sorted(missing)}")
        kw: dict[str, Any] = {
            k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items() if k in names
        }
        if kw["counts"] is not None:
            kw["counts"] = dict(kw["counts"])
        return cls(**kw)


_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(FkLookupResult))
#: Fields a record may lack (added after the first records were written).
_OPTIONAL: tuple[str, ...] = ("step_ref", "step_max")


class _Query(NamedTuple):
    phase: str
    tx: float
    tz: float
    y_lo: float
    y_hi: float
    dist_max: float
    j3_ref: float | None
    j5_ref: float | None
    band_deg: float
    ref: tuple[float, ...] | None  # the joint box actually searched (ref_joints and/or step_ref)
    tol: float | None
    floor: float | None
    ref_col: NDArray[np.float64] | None  # ref as a (6, 1) column, for the band-view tests
    ref_in: tuple[float, ...] | None  # ref_joints / joint_tol as given (reported)
    tol_in: float | None
    step_ref: tuple[float, ...] | None
    step_max: float | None


def _number(name: str, value: object, *, positive: bool = False) -> float:
    if type(value) is float or type(value) is int:  # fast path of the common case
        v = float(value)
        if math.isfinite(v) and (v > 0 or not positive):
            return v
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{name} must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if positive and v <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return v


def _numbers(name: str, value: object, n: int) -> tuple[float, ...]:
    if (
        isinstance(value, (tuple, list))
        and len(value) == n  # fast path of the common case
        and all(type(v) is float and math.isfinite(v) for v in value)
    ):
        return tuple(value)
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)):
        raise ValueError(f"{name} must be a sequence of {n} numbers, got {value!r}")
    items = list(value)
    if len(items) != n:
        raise ValueError(f"{name} must have {n} values, got {len(items)}")
    return tuple(_number(f"{name}[{i}]", v) for i, v in enumerate(items))


def _validate(
    phase: object,
    target_xz: object,
    ee_y_min: object,
    ee_y_max: object,
    dist_max: object,
    j3_ref: object,
    j5_ref: object,
    band_deg: object,
    ref_joints: object,
    joint_tol: object,
    ee_y_floor: object,
    step_ref: object = None,
    step_max: object = None,
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
        raise ValueError(
            "joint_tol is required with ref_joints (the rig dropped the filter silently)"
        )
    if ref is None and joint_tol is not None:
        raise ValueError("joint_tol given without ref_joints")
    tol = None if joint_tol is None else _number("joint_tol", joint_tol, positive=True)
    sref = None if step_ref is None else _numbers("step_ref", step_ref, 6)
    if (sref is None) != (step_max is None):
        raise ValueError("step_ref and step_max go together (the joint-continuity bound)")
    smax = None if step_max is None else _number("step_max", step_max, positive=True)
    eff_ref, eff_tol = ref, tol
    if sref is not None and smax is not None:
        # both are boxes around a pose: searched as one box, so the indexed and brute
        # methods keep their single ref/tol test
        if ref is not None and tol is not None:
            if ref != sref:
                raise ValueError(
                    "step_ref must equal ref_joints when both are given (one joint box is searched)"
                )
            eff_tol = min(tol, smax)
        else:
            eff_ref, eff_tol = sref, smax
    return _Query(
        str(phase),
        tx,
        tz,
        lo,
        hi,
        _number("dist_max", dist_max, positive=True),
        None if j3_ref is None else _number("j3_ref", j3_ref),
        None if j5_ref is None else _number("j5_ref", j5_ref),
        _number("band_deg", band_deg, positive=True),
        eff_ref,
        eff_tol,
        None if ee_y_floor is None else _number("ee_y_floor", ee_y_floor),
        None if eff_ref is None else np.array(eff_ref)[:, None],
        ref,
        tol,
        sref,
        smax,
    )


def joint_violations(angles: Sequence[float], j1_max: float = J1_SAFE_MAX) -> tuple[str, ...]:
    """Human-readable list of SDK-limit and j1 <= ``j1_max`` violations of one pose."""
    out = []
    for i, a in enumerate(angles):
        if a < JOINT_MIN[i]:
            out.append(f"j{i} {a:.2f} < {JOINT_MIN[i]:.0f} (SDK limit)")
        elif a > JOINT_MAX[i]:
            out.append(f"j{i} {a:.2f} > {JOINT_MAX[i]:.0f} (SDK limit)")
    if angles[1] > j1_max:
        out.append(f"j1 {angles[1]:.2f} > {j1_max:g} (firmware ignores the send above ~90.7)")
    return tuple(out)


# --- filters: the same element-wise expressions on the whole table or on a subset ---


def _filter_steps(table: FkTable, q: _Query) -> list[tuple[str, Any]]:
    """(name, test(rows) -> bool mask) for safety, j3, j5, ref_joints, in that order."""
    steps: list[tuple[str, Any]] = [("safety", lambda r: table.col("safe")[r])]
    if q.j3_ref is not None:
        j3, ref3 = table.col("j3"), q.j3_ref
        steps.append(("j3", lambda r: np.abs(j3[r] - ref3) <= q.band_deg))
    if q.j5_ref is not None:
        j5, ref5 = table.col("j5"), q.j5_ref
        steps.append(("j5", lambda r: np.abs(j5[r] - ref5) <= q.band_deg))
    if q.ref is not None:
        ref = np.asarray(q.ref)
        steps.append(("ref_joints", lambda r: (np.abs(table.joints[r] - ref) <= q.tol).all(axis=1)))
    return steps


def _d2(table: FkTable, q: _Query, rows: NDArray[np.int64]) -> NDArray[np.float64]:
    """Squared x-z distance of ``rows``: (x - tx)**2 + (z - tz)**2 element by element,
    the same operations as the full scan (one gather of the interleaved x, z pairs)."""
    d = table.col("xz")[rows] - (q.tx, q.tz)
    d *= d
    return d[:, 0] + d[:, 1]


def _nearest(table: FkTable, q: _Query, cand: NDArray[np.int64]) -> tuple[int, float]:
    """Lowest row number among the candidates nearest in x-z, and its squared distance."""
    d2 = _d2(table, q, cand)
    best = d2.min()
    return int(cand[d2 == best].min()), float(best)


def _brute(table: FkTable, q: _Query) -> tuple[int | None, dict[str, int]]:
    """The rig's method: masks over every row, nearest by a full scan (argmin = first row)."""
    y = table.col("ee_y")
    m = (y >= q.y_lo) & (y < q.y_hi)
    counts = {"band": int(m.sum())}
    for name, test in _filter_steps(table, q):
        m &= test(slice(None))
        counts[name] = int(m.sum())
    if not m.any():
        return None, counts
    dx = table.col("ee_x") - q.tx
    dz = table.col("ee_z") - q.tz
    d2 = np.where(m, dx * dx + dz * dz, np.inf)
    return int(np.argmin(d2)), counts


def _rig(table: FkTable, q: _Query) -> tuple[int | None, dict[str, int]]:
    """The rig's method: a vectorised band filter first, then the other filters and the x-z
    distance on the band's rows only; nearest wins (argmin over ascending rows = lowest row)."""
    y = table.col("ee_y")
    rows = np.flatnonzero((y >= q.y_lo) & (y < q.y_hi))
    counts = {"band": int(rows.size)}
    for name, test in _filter_steps(table, q):
        rows = rows[test(rows)]
        counts[name] = int(rows.size)
    if rows.size == 0:
        return None, counts
    dx = table.col("ee_x")[rows] - q.tx
    dz = table.col("ee_z")[rows] - q.tz
    return int(rows[np.argmin(dx * dx + dz * dz)]), counts


_FULL_SCANS = {"brute": _brute, "rig": _rig}


def _search(table: FkTable, q: _Query, method: str) -> tuple[int | None, dict[str, int] | None]:
    """The chosen method's row (None: nothing passes) and its filter counts."""
    scan = _FULL_SCANS.get(method)
    return scan(table, q) if scan is not None else _indexed(table, q)


def _band_scan(table: FkTable, q: _Query) -> tuple[int | None, dict[str, int]]:
    """Exact answer from the band only: contiguous slices of the ee_y-ordered columns."""
    idx = table.index
    sl = idx.band_slice(q.y_lo, q.y_hi)
    counts = {"band": sl.stop - sl.start}

    def cols(name: str) -> NDArray[Any]:
        return idx.ycol(table, name)[sl]

    m = cols("safe").copy()
    counts["safety"] = int(m.sum())
    if q.j3_ref is not None:
        m &= np.abs(cols("j3") - q.j3_ref) <= q.band_deg
        counts["j3"] = int(m.sum())
    if q.j5_ref is not None:
        m &= np.abs(cols("j5") - q.j5_ref) <= q.band_deg
        counts["j5"] = int(m.sum())
    if q.ref is not None:
        for j in range(6):
            m &= np.abs(cols(f"j{j}") - q.ref[j]) <= q.tol
        counts["ref_joints"] = int(m.sum())
    pos = np.flatnonzero(m)
    if pos.size == 0:
        return None, counts
    return _nearest(table, q, idx.by_y[sl.start + pos])[0], counts


def _indexed(table: FkTable, q: _Query) -> tuple[int | None, dict[str, int] | None]:
    idx = table.index
    view = idx.band_view(table, q.y_lo, q.y_hi)
    halves = [h for h in WINDOWS_M if h < q.dist_max]
    halves.append(q.dist_max)
    if view is not None:
        for half in halves:
            found = _view_window(idx, view, q, half)
            if found is not None:
                return found, None
        return _view_scan(view, q, nearest=True)
    steps = _filter_steps(table, q)
    for half in halves:
        found = _window(idx, table, q, steps, half)
        if found is not None:
            return found, None
    return _band_scan(table, q)


def _view_mask(q: _Query, w: NDArray[np.float64]) -> NDArray[np.bool_] | None:
    """The optional filters (j3, j5, ref_joints) on a window of a band view; None if none
    applies. The same element-wise expressions as ``_filter_steps``, so the same rows pass."""
    m = None
    j0 = BandView.J0
    if q.j3_ref is not None:
        m = np.abs(w[j0 + 3] - q.j3_ref) <= q.band_deg
    if q.j5_ref is not None:
        m5 = np.abs(w[j0 + 5] - q.j5_ref) <= q.band_deg
        m = m5 if m is None else m & m5
    if q.ref_col is not None:  # given with ref_joints
        # The same element-wise |j_i - ref_i| <= tol as the reference's, computed as one
        # (6, k) block for small k (4 numpy calls instead of 4 per joint: the calls are the
        # cost) and joint by joint for large k (numpy broadcasts a (6, 1) column and
        # reduces over the short axis several times slower than it streams one row).
        if w.shape[1] <= _BLOCK_MAX:
            mr = (np.abs(w[j0 : j0 + 6] - q.ref_col) <= q.tol).all(axis=0)
            m = mr if m is None else m & mr
        else:
            for i in range(6):
                mi = np.abs(w[j0 + i] - q.ref_col[i]) <= q.tol
                m = mi if m is None else m & mi
    return m


def _view_window(idx: FkIndex, view: BandView, q: _Query, half: float) -> int | None:
    """The nearest passing row of the band view if it lies within ``half`` (minus a
    rounding slack) of the target, else None: every row outside the window's cells is
    farther than that, so the answer is exact."""
    w = view.window(idx, q.tx, q.tz, half)
    if w is None:
        return None
    dx = w[BandView.X] - q.tx
    dz = w[BandView.Z] - q.tz
    d2 = dx * dx + dz * dz
    if q.j3_ref is not None or q.j5_ref is not None or q.ref is not None:
        d2[~_view_mask(q, w)] = np.inf  # type: ignore[operator]
    best = d2.min()
    reach = half - 1e-9
    if not best <= reach * reach:
        return None
    hits = np.flatnonzero(d2 == best)
    rows = w[BandView.ROW]
    return int(rows[hits[0]]) if hits.size == 1 else int(rows[hits].min())


def _view_scan(view: BandView, q: _Query, *, nearest: bool) -> tuple[int | None, dict[str, int]]:
    """Exact answer (if ``nearest``) and the counts after each filter from the whole band view.

    The band and safety counts are known from the view. With ref_joints, every row
    passing ``|j0 - ref[0]| <= tol`` lies in one slice of the view sorted by j0 (the
    slice is widened by a slack far above the rounding of the subtraction), and the
    last count and the nearest come from that slice alone. The tests are the same
    element-wise expressions as ``_filter_steps``, so the same rows pass.
    """
    counts = {"band": view.n_band, "safety": view.size}
    j0 = BandView.J0
    w = view.data
    keep: NDArray[np.bool_] | None = None  # over the columns of ``w``; None: all
    if q.j3_ref is not None:
        keep = np.abs(w[j0 + 3] - q.j3_ref) <= q.band_deg
        counts["j3"] = int(np.count_nonzero(keep))
    if q.j5_ref is not None:
        m5 = np.abs(w[j0 + 5] - q.j5_ref) <= q.band_deg
        keep = m5 if keep is None else keep & m5
        counts["j5"] = int(np.count_nonzero(keep))
    if q.ref is not None:
        assert q.tol is not None
        r0, tol = q.ref[0], q.tol
        slack = 1e-9 * (1.0 + abs(r0) + tol)
        s = view.by_j0()
        lo, hi = np.searchsorted(s[j0], (r0 - tol - slack, r0 + tol + slack), "left").tolist()
        w = s[:, lo:hi]
        keep = _view_mask(q, w)  # the j3, j5 and ref_joints tests on the slice
        assert keep is not None
        counts["ref_joints"] = int(np.count_nonzero(keep))
    if not nearest:
        return None, counts
    x, z, rows = w[BandView.X], w[BandView.Z], w[BandView.ROW]
    if keep is not None:
        pos = np.flatnonzero(keep)
        x, z, rows = x[pos], z[pos], rows[pos]
    if rows.size == 0:
        return None, counts
    dx = x - q.tx
    dz = z - q.tz
    d2 = dx * dx + dz * dz
    return int(rows[d2 == d2.min()].min()), counts


def _counts(table: FkTable, q: _Query) -> dict[str, int]:
    """Rows left after each filter (for an out_of_range reason found by the window search)."""
    view = table.index.band_view(table, q.y_lo, q.y_hi, build=False)
    return _view_scan(view, q, nearest=False)[1] if view is not None else _band_scan(table, q)[1]


def _passing(steps: list[tuple[str, Any]], rows: NDArray[np.int64]) -> NDArray[np.bool_]:
    m: NDArray[np.bool_] = steps[0][1](rows)  # safety first: a fresh (gathered) array
    for _name, test in steps[1:]:
        m &= test(rows)
    return m


def _window(
    idx: Any, table: FkTable, q: _Query, steps: list[tuple[str, Any]], half: float
) -> int | None:
    """The nearest candidate if one lies within ``half`` (minus a rounding slack), else None.

    Every band row outside the window is farther than that, so the answer is exact.
    Candidates are tested nearest first, in chunks, so the joint filters run on few rows.
    """
    rows = idx.window_rows(q.tx, q.tz, half, q.y_lo, q.y_hi)
    if rows.size == 0:
        return None
    reach = half - 1e-9
    d2 = _d2(table, q, rows)
    inside = d2 <= reach * reach
    rows, d2 = rows[inside], d2[inside]
    if rows.size == 0:
        return None
    k = rows.size
    for size in _CHUNKS:
        if size < k:
            part = np.argpartition(d2, size - 1)[:size]  # the ``size`` nearest, unordered
            sel, sel_d2 = rows[part], d2[part]
        else:
            sel, sel_d2 = rows, d2
        ok = _passing(steps, sel)
        if ok.any():
            best = sel_d2[ok].min()  # nothing outside ``sel`` is nearer
            ties = rows[d2 == best]
            if ties.size == 1:
                return int(ties[0])
            return int(ties[_passing(steps, ties)].min())
        if size >= k:
            return None
    return None


def _describe_counts(table: FkTable, q: _Query, counts: dict[str, int]) -> str:
    label = {
        "band": f"ee_y band [{q.y_lo:.3f}, {q.y_hi:.3f})",
        "safety": f"joint limits + j1<={table.j1_max:g}",
        "j3": f"j3 within {q.band_deg:g} of {q.j3_ref}",
        "j5": f"j5 within {q.band_deg:g} of {q.j5_ref}",
        "ref_joints": (
            f"all joints within {q.tol} of ref_joints"
            if q.step_ref is None
            else f"every joint within {q.tol:g}° of the step reference"
        ),
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
    step_ref: Sequence[float] | None = None,
    step_max: float | None = None,
) -> FkLookupResult:
    """Choose the table row for ``target_xz`` (docs/lookup.md); never raises for out_of_range.

    Raises ValueError naming the argument for: an unknown phase or method, a
    target that is not two finite numbers, ee_y_min >= ee_y_max, a non-numeric
    or non-finite j3_ref/j5_ref/ee_y_floor, band_deg/dist_max/joint_tol <= 0,
    ref_joints not six numbers, ref_joints without joint_tol or the reverse.

    ``step_ref``/``step_max`` bound each joint's change from the pose the arm is at
    (docs/safety.md, "Joint continuity"): only rows with every joint within ``step_max``
    of ``step_ref`` are candidates. With ref_joints too, step_ref must equal it (the
    tighter of the two tolerances applies). When the bound alone leaves nothing within
    reach, the reason (code ``joint_step``) names the joint and the jump the nearest
    row would need.
    """
    if not isinstance(table, FkTable):
        raise ValueError(f"table must be an FkTable, got {type(table).__name__}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
    q = _validate(
        phase,
        target_xz,
        ee_y_min,
        ee_y_max,
        dist_max,
        j3_ref,
        j5_ref,
        band_deg,
        ref_joints,
        joint_tol,
        ee_y_floor,
        step_ref,
        step_max,
    )
    best, counts = _search(table, q, method)
    res = _finish(table, q, best, counts, method)
    if not res.ok and q.step_ref is not None:
        res = _explain_step(table, q, res, method)
    return res


def _explain_step(table: FkTable, q: _Query, res: FkLookupResult, method: str) -> FkLookupResult:
    """An out_of_range under the continuity bound: if the lookup without the bound would
    have found a row, say which joint that row moves too far (reason code ``joint_step``)."""
    free = q._replace(
        ref=q.ref_in,
        tol=q.tol_in,
        ref_col=None if q.ref_in is None else np.array(q.ref_in)[:, None],
        step_ref=None,
        step_max=None,
    )
    best, counts = _search(table, free, method)
    if best is None or not _finish(table, free, best, counts, method).ok:
        return res
    assert q.step_ref is not None and q.step_max is not None
    jumps = table.joints[best] - np.asarray(q.step_ref)
    j = int(np.argmax(np.abs(jumps)))
    reason = (
        f"out_of_range: no row within {q.dist_max * 1000:.0f} mm keeps every joint within "
        f"{q.step_max:g}° of the reference pose: nearest needs j{j} {float(jumps[j]):+.1f}° "
        f"(row {best})"
    )
    d = dict(res.__dict__)
    d.update(reason=reason, reason_code="joint_step")
    return FkLookupResult._of(d)


def _finish(
    table: FkTable, q: _Query, best: int | None, counts: dict[str, int] | None, method: str
) -> FkLookupResult:
    if best is None:
        assert counts is not None
        emptied = next(k for k, v in counts.items() if v == 0)
        why = f"out_of_range: no candidate left after the {emptied} filter ({_describe_counts(table, q, counts)})"
        return _result(
            table,
            q,
            method,
            ok=False,
            pose_id=None,
            angles=None,
            selected_index=None,
            selected_ee_y=None,
            resid_x=None,
            resid_z=None,
            distance=None,
            nearest_index=None,
            nearest_xyz=None,
            nearest_angles=None,
            joint_limit_ok=False,
            violations=(),
            max_dj=None,
            reason=why,
            reason_code="no_candidates",
            counts=counts,
        )
    x, y, z = table.xyz[best].tolist()
    angles = tuple(table.joints[best].tolist())
    dx = x - q.tx  # Python floats: the same IEEE operations as the array code
    dz = z - q.tz
    dist = math.sqrt(dx * dx + dz * dz)
    violations = joint_violations(angles, table.j1_max)
    max_dj = None if q.ref is None else max(abs(a - r) for a, r in zip(angles, q.ref, strict=True))
    code: str | None = None
    reason: str | None = None
    if dist > q.dist_max:
        code = "too_far"
        reason = f"out_of_range: nearest candidate is {dist * 1000:.1f} mm away > dist_max {q.dist_max * 1000:.1f} mm"
    elif q.floor is not None and y < q.floor:
        code = "below_floor"
        reason = f"out_of_range: chosen ee_y {y:.4f} is below ee_y_floor {q.floor:.4f}"
    ok = code is None
    if not ok:
        if counts is None:
            counts = _counts(table, q)
        reason = f"{reason} ({_describe_counts(table, q, counts)})"
    return _result(
        table,
        q,
        method,
        ok=ok,
        pose_id=f"fk_row_{best}" if ok else None,
        angles=angles if ok else None,
        selected_index=best if ok else None,
        selected_ee_y=y if ok else None,
        resid_x=dx,
        resid_z=dz,
        distance=dist,
        nearest_index=best,
        nearest_xyz=(x, y, z),
        nearest_angles=angles,
        joint_limit_ok=not violations,
        violations=violations,
        max_dj=max_dj,
        reason=reason,
        reason_code=code,
        counts=None if ok else counts,
    )


def _result(table: FkTable, q: _Query, method: str, **outcome: Any) -> FkLookupResult:
    """The result: the query as used plus ``outcome`` (the other 17 fields)."""
    outcome.update(
        phase=q.phase,
        method=method,
        target_xz=(q.tx, q.tz),
        band=(q.y_lo, q.y_hi),
        dist_max=q.dist_max,
        j3_ref=q.j3_ref,
        j5_ref=q.j5_ref,
        band_deg=q.band_deg,
        ref_joints=q.ref_in,
        joint_tol=q.tol_in,
        ee_y_floor=q.floor,
        table_checksum=table.checksum,
        step_ref=q.step_ref,
        step_max=q.step_max,
    )
    return FkLookupResult._of(outcome)
