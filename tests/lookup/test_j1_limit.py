"""The lookups keep to the configured j1 limit (the guard's ``j1_max``), not a constant.

A lookup that chose a pose above the guard's limit would only have it refused a
moment later: with ``j1_max`` lowered, no pick or place lookup may return such a
pose, on any search path (band views, the whole-table grid, brute). With the
default limit every answer is the one the hard-coded 88° gave.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mecharm.common.kinematics import JOINT_MAX, JOINT_MIN
from mecharm.runtime.lookup import FkTable, fk_lookup, j0_lookup, load_arc, load_table
from mecharm.runtime.lookup.j0 import DEFAULT_PLACE_ARC
from mecharm.runtime.lookup.table import J1_SAFE_MAX, TableError, file_checksum

LOW = 60.0
PICK_BAND = (0.010, 0.040)
PLACE_BAND = (0.070, 0.100)


def _queries() -> list[dict[str, Any]]:
    """A 20 mm grid over the pick and the place regions, as the stage machine asks."""
    arc = load_arc(DEFAULT_PLACE_ARC)
    qs: list[dict[str, Any]] = []
    for x in np.arange(0.14, 0.2401, 0.02):
        for z in np.arange(0.20, 0.2801, 0.02):
            qs.append(
                {
                    "phase": "pick",
                    "target_xz": (float(x), float(z)),
                    "ee_y_min": PICK_BAND[0],
                    "ee_y_max": PICK_BAND[1],
                }
            )
    for x in np.arange(-0.24, -0.1399, 0.02):
        for z in np.arange(0.14, 0.2401, 0.02):
            t = (float(x), float(z))
            qs.append(
                {
                    "phase": "place_withblock",
                    "target_xz": t,
                    "ee_y_min": PLACE_BAND[0],
                    "ee_y_max": PLACE_BAND[1],
                    "ref_joints": j0_lookup(arc, t).angles,
                    "joint_tol": 15.0,
                    "ee_y_floor": PLACE_BAND[0],
                }
            )
    return qs


_BAND_ROWS: dict[tuple[int, float, float, float], tuple[FkTable, np.ndarray]] = {}


def _band_rows(table: FkTable, lo: float, hi: float, j1_max: float) -> np.ndarray:
    """The rows (ascending) in the band [lo, hi), inside the joint limits and with j1 <=
    j1_max: the same for every query of a band, so worked out once per table and band."""
    key = (id(table), lo, hi, j1_max)
    hit = _BAND_ROWS.get(key)
    if hit is None or hit[0] is not table:
        y, j = table.xyz[:, 1], table.joints
        m = (y >= lo) & (y < hi)
        m &= np.all((j >= np.asarray(JOINT_MIN)) & (j <= np.asarray(JOINT_MAX)), axis=1) & (
            j[:, 1] <= j1_max
        )
        hit = _BAND_ROWS[key] = (table, np.flatnonzero(m))
    return hit[1]


def _reference(table: FkTable, q: dict[str, Any], j1_max: float) -> int | None:
    """The rig's rule written out on the raw arrays: the lowest row nearest in x-z among the
    band's rows inside the joint limits, with j1 <= j1_max and every joint within tol of ref."""
    rows = _band_rows(table, q["ee_y_min"], q["ee_y_max"], j1_max)
    if "ref_joints" in q:
        near = np.abs(table.joints[rows] - np.asarray(q["ref_joints"])) <= q["joint_tol"]
        rows = rows[np.all(near, axis=1)]
    if not rows.size:
        return None
    xyz = table.xyz[rows]
    d2 = (xyz[:, 0] - q["target_xz"][0]) ** 2 + (xyz[:, 2] - q["target_xz"][1]) ** 2
    return int(rows[np.argmin(d2)])  # argmin: the first of equals, so the lowest row


def _answers(table: FkTable, method: str) -> list[Any]:
    out = []
    for q in _queries():
        r = fk_lookup(table, method=method, **q)
        out.append((r.ok, r.nearest_index, r.angles, r.reason))
    return out


@pytest.fixture(scope="module")
def low(default_table_path: Path) -> FkTable:
    return load_table(default_table_path, j1_max=LOW).warm([PICK_BAND, PLACE_BAND])


@pytest.mark.slow  # a 20 mm grid through every search path
def test_lowered_limit_no_lookup_returns_j1_above_it(low: FkTable, default_table: FkTable) -> None:
    grid_only = load_table(low.path, j1_max=LOW)  # type: ignore[arg-type]
    grid_only.index.view_after = 0  # pin the whole-table grid path (no band views)
    changed = 0
    for q in _queries():
        default = fk_lookup(default_table, **q)
        results = [
            fk_lookup(low, **q),
            fk_lookup(grid_only, **q),
            fk_lookup(low, method="brute", **q),
        ]
        expect = _reference(low, q, LOW)
        for r in results:
            assert r.nearest_index == expect or not r.ok, q
            if r.ok:
                assert r.angles is not None and r.angles[1] <= LOW, (q, r.angles)
                assert r.joint_limit_ok and r.violations == ()
        assert len({(r.ok, r.nearest_index, r.reason) for r in results}) == 1, q
        changed += default.ok and default.angles is not None and default.angles[1] > LOW
    assert changed > 5  # the limit matters on this grid: the test can fail


@pytest.mark.slow  # 2.0 s alone, quiet
def test_lowered_limit_is_named_in_reasons_and_violations(low: FkTable) -> None:
    r = fk_lookup(low, "pick", (0.19, 0.24), *PICK_BAND, dist_max=1e-4)
    assert not r.ok and f"j1<={LOW:g}" in (r.reason or "")
    from mecharm.runtime.lookup.fk_lookup import joint_violations

    assert joint_violations([0.0, 70.0, 0.0, 0.0, 0.0, 0.0], LOW) == (
        "j1 70.00 > 60 (firmware ignores the send above ~90.7)",
    )
    assert joint_violations([0.0, 70.0, 0.0, 0.0, 0.0, 0.0]) == ()


@pytest.mark.slow  # a 20 mm grid through every search path
def test_default_limit_gives_the_answers_of_the_fixed_88(
    default_table: FkTable, default_table_path: Path
) -> None:
    assert default_table.j1_max == J1_SAFE_MAX == 88.0
    explicit = load_table(default_table_path, j1_max=88.0)
    indexed = _answers(default_table, "indexed")
    assert indexed == _answers(explicit, "indexed") == _answers(default_table, "brute")
    for q, (_ok, nearest, _angles, _reason) in zip(_queries(), indexed, strict=True):
        assert nearest == _reference(default_table, q, 88.0), q
    assert sum(ok for ok, *_ in indexed) > 30


def test_limit_leaves_checksum_and_cache_alone(
    default_table_path: Path, default_table: FkTable
) -> None:
    caches = sorted(default_table_path.parent.glob(".*.npz"))
    low = load_table(default_table_path, j1_max=LOW)
    assert low.checksum == default_table.checksum == file_checksum(default_table_path)
    assert sorted(default_table_path.parent.glob(".*.npz")) == caches
    assert int(low.col("safe").sum()) < int(default_table.col("safe").sum())


@pytest.mark.slow  # 2.0 s alone, quiet
def test_with_j1_max_matches_a_table_loaded_with_it(default_table: FkTable, low: FkTable) -> None:
    default_table.warm([PICK_BAND, PLACE_BAND])
    derived = default_table.with_j1_max(LOW)
    assert default_table.with_j1_max(88.0) is default_table
    assert derived.j1_max == LOW and derived.checksum == default_table.checksum
    assert _answers(derived, "indexed") == _answers(low, "indexed")
    assert _answers(default_table, "indexed") == _answers(
        default_table, "brute"
    )  # the original is untouched


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_limit_is_refused(default_table_path: Path, bad: float) -> None:
    with pytest.raises(TableError, match="j1_max"):
        load_table(default_table_path, j1_max=bad)
