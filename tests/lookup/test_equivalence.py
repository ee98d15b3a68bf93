"""The indexed fk_lookup gives exactly the reference (brute) answer: 10,000 random queries
through both search paths as a trial mixes them, and 3,000 more pinned to each path.

Queries mix grid-aligned targets (exact distance ties), band edges on row values
(the half-open rule), every optional filter, tiny and huge dist_max and floors.
The whole result must match, not only the row: counts, reasons, residuals.
Both search paths of the indexed method are covered: a band's ``BandView`` (from
its second use on) and the whole-table grid (one-off bands), mixed and pinned.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pytest

from mecharm.runtime.lookup import FkTable, fk_lookup, j0_lookup, load_arc
from mecharm.runtime.lookup.build import lattice, rows_from_angles
from mecharm.runtime.lookup.index import MAX_VIEWS
from mecharm.runtime.lookup.j0 import DEFAULT_PLACE_ARC

from .conftest import dyadic_table, place_rows


def random_query(rng: np.random.Generator, table: FkTable) -> dict[str, Any]:
    ys = table.col("ee_y")
    if rng.random() < 0.5:
        i = int(rng.integers(table.n_rows))
        tx = float(table.col("ee_x")[i]) + int(rng.integers(-3, 4)) / 256
        tz = float(table.col("ee_z")[i]) + int(rng.integers(-3, 4)) / 256
    else:
        tx = float(
            rng.uniform(ys.size and table.col("ee_x").min() - 0.05, table.col("ee_x").max() + 0.05)
        )
        tz = float(rng.uniform(table.col("ee_z").min() - 0.05, table.col("ee_z").max() + 0.05))
    a, b = sorted(float(v) for v in rng.choice(ys, 2))
    if rng.random() < 0.3:
        a, b = a - float(rng.uniform(0, 0.03)), b + float(rng.uniform(0, 0.03))
    if a == b:
        b = a + 1 / 256
    q: dict[str, Any] = {
        "phase": str(rng.choice(["pick", "place_withblock", "place_noblock"])),
        "target_xz": (tx, tz),
        "ee_y_min": a,
        "ee_y_max": b,
        "dist_max": float(rng.choice([0.002, 0.005, 0.01, 0.03, 0.1, 1.0])),
    }
    if rng.random() < 0.3:
        q["j3_ref"] = float(rng.integers(-20, 21))
        q["band_deg"] = float(rng.choice([0.5, 1.0, 5.0, 10.0]))
    if rng.random() < 0.3:
        q["j5_ref"] = float(rng.integers(-40, 0))
    if rng.random() < 0.4:
        ref = table.joints[int(rng.integers(table.n_rows))] + rng.normal(0, 5, 6)
        q["ref_joints"] = [float(v) for v in ref]
        q["joint_tol"] = float(rng.choice([2.0, 5.0, 15.0, 30.0, 90.0]))
    if rng.random() < 0.3:  # the joint-continuity bound: alone, or on the ref_joints pose
        if "ref_joints" in q and rng.random() < 0.5:
            q["step_ref"] = list(q["ref_joints"])
        else:
            ref = table.joints[int(rng.integers(table.n_rows))] + rng.normal(0, 5, 6)
            q["step_ref"] = [float(v) for v in ref]
            q.pop("ref_joints", None)
            q.pop("joint_tol", None)
        q["step_max"] = float(rng.choice([2.0, 5.0, 15.0, 30.0, 90.0]))
    if rng.random() < 0.3:
        q["ee_y_floor"] = float(rng.choice(ys))
    return q


def assert_same(table: FkTable, q: dict[str, Any]) -> bool:
    ref = fk_lookup(table, method="brute", **q).to_dict()
    got = fk_lookup(table, method="indexed", **q).to_dict()
    rig = fk_lookup(table, method="rig", **q).to_dict()  # the bench's baseline answers the same
    for d in (ref, got, rig):
        d.pop("method")
    assert got == ref, q
    assert rig == ref, q
    return bool(ref["ok"])


@pytest.mark.slow
def test_ten_thousand_random_queries_on_a_tie_rich_table() -> None:
    table = dyadic_table(3000, seed=1)
    rng = np.random.default_rng(2)
    oks = [assert_same(table, random_query(rng, table)) for _ in range(10_000)]
    # the mix exercises both outcomes in earnest
    assert 0.2 < np.mean(oks) < 0.9


@pytest.mark.parametrize(
    ("view_after", "n", "block_max"),
    [
        pytest.param(1, 3_000, None, marks=pytest.mark.slow),
        (1, 3_000, 0),
        pytest.param(0, 3_000, None, marks=pytest.mark.slow),  # 2.2 s alone, quiet
    ],
)
def test_random_queries_through_each_search_path(
    view_after: int, n: int, block_max: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pin the path: every band through its BandView (1), or all through the whole-table grid (0);
    ``block_max`` 0 runs the band-view ref_joints test joint by joint (the large-window form)."""
    if block_max is not None:
        monkeypatch.setattr(
            importlib.import_module("mecharm.runtime.lookup.fk_lookup"), "_BLOCK_MAX", block_max
        )
    table = dyadic_table(3000, seed=1)
    table.index.view_after = view_after
    rng = np.random.default_rng(20 + view_after + (10 if block_max is not None else 0))
    oks = [assert_same(table, random_query(rng, table)) for _ in range(n)]
    assert 0.2 < np.mean(oks) < 0.9
    views = table.index.__dict__.get("_views", {})
    assert (0 < len(views) <= MAX_VIEWS) if view_after else not views


def test_band_view_holds_the_safe_rows_of_the_band() -> None:
    table = dyadic_table(3000, seed=3)
    y = table.col("ee_y")
    lo, hi = float(np.quantile(y, 0.3)), float(np.quantile(y, 0.6))
    view = table.index.band_view(table, lo, hi, build=True)
    assert view is not None
    rows = view.data[view.ROW].astype(np.int64)
    in_band = (y >= lo) & (y < hi)
    assert view.n_band == int(in_band.sum())
    assert np.array_equal(np.sort(rows), np.flatnonzero(in_band & table.col("safe")))
    assert np.array_equal(view.data[view.X], table.col("ee_x")[rows])
    assert np.array_equal(view.data[view.Z], table.col("ee_z")[rows])
    assert np.array_equal(view.data[view.J0 : view.J0 + 6].T, table.joints[rows])
    # each cell's rows are the slice starts[c]:starts[c + 1]
    idx = table.index
    ix = ((view.data[view.X] - idx.x0) // idx.cell).astype(np.int64)
    iz = ((view.data[view.Z] - idx.z0) // idx.cell).astype(np.int64)
    cells = ix * idx.nz + iz
    starts = np.asarray(view.starts)
    assert np.array_equal(np.repeat(np.arange(starts.size - 1), np.diff(starts)), cells)
    # the first request of a band only counts; the second builds; at most MAX_VIEWS are kept
    other = dyadic_table(500, seed=4)
    assert other.index.band_view(other, 0.0, 0.05) is None
    assert other.index.band_view(other, 0.0, 0.05) is not None
    for k in range(MAX_VIEWS + 2):
        other.index.band_view(other, 0.0, 0.06 + k / 256, build=True)
    assert len(other.index.__dict__["_views"]) == MAX_VIEWS


def test_random_queries_on_fk_lattice_rows() -> None:
    rows = np.concatenate(
        [
            place_rows(),
            rows_from_angles(lattice((-38.0, 68.18, -5.55, 0.0, -45.72, -30.0), steps=5)),
        ]
    )
    table = FkTable.from_rows(rows)
    rng = np.random.default_rng(3)
    for _ in range(1000):
        assert_same(table, random_query(rng, table))


def test_place_queries_with_the_approach_as_reference() -> None:
    table = FkTable.from_rows(place_rows(j0s=(20.0, 40.0, 60.0)))
    arc = load_arc(DEFAULT_PLACE_ARC)
    rng = np.random.default_rng(4)
    for _ in range(300):
        t = (float(rng.uniform(-0.3, -0.1)), float(rng.uniform(0.1, 0.3)))
        ap = j0_lookup(arc, t)
        q = {
            "phase": "place_withblock",
            "target_xz": t,
            "ee_y_min": 0.07,
            "ee_y_max": 0.1,
            "ref_joints": list(ap.angles),
            "joint_tol": 15.0,
            "ee_y_floor": 0.07,
        }
        assert_same(table, q)
