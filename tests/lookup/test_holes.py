"""Hole map, seeds, clusters and fill on small tables whose holes are known."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mecharm.common.layout import FK_TABLE
from mecharm.runtime.lookup import FkTable, build_table, j0_lookup, load_arc, load_table
from mecharm.runtime.lookup.build import rows_from_angles
from mecharm.runtime.lookup.j0 import DEFAULT_PLACE_ARC
from mecharm.tools.fktable.holes import (
    Cell,
    ascii_map,
    cells_csv,
    cluster_seeds,
    fill_table,
    grid_points,
    hole_map,
    summarize,
)

from .conftest import place_rows


@pytest.fixture(scope="module")
def arc():
    return load_arc(DEFAULT_PLACE_ARC)


def test_grid_is_195_cells() -> None:
    pts = grid_points()
    assert len(pts) == 195
    assert pts[0] == (-0.05, 0.10) and pts[-1] == (-0.33, 0.34)
    assert len({p[0] for p in pts}) == 15 and len({p[1] for p in pts}) == 13


def test_empty_region_is_all_holes_without_seeds(arc) -> None:
    t = FkTable.from_rows(rows_from_angles(np.array([[0, 0, 0, 0, 0, 0.0]])))
    cells = hole_map(t, arc)
    assert summarize(cells) == {
        "cells": 195,
        "dense": 0,
        "marginal": 0,
        "holes": 195,
        "seeds": 0,
        "without_seed": 195,
    }


def test_known_dense_cells_and_seeds(arc) -> None:
    # the approach_place lattice at j0 = 40 serves the cells whose approach j0 is near 40;
    # one extra row near (-0.31, 0.12), in the band but 40 degrees off in j2: a seed, not a hit
    seed_angles = np.array([[70.0, 57.39, 57.49, 0.08, -89.2, -29.44]])
    rows = np.concatenate([place_rows(j0s=(40.0,), steps=7)])
    seed_row = rows_from_angles(seed_angles)[0].copy()
    seed_row[:3] = (-0.31, 0.085, 0.12)
    table = FkTable.from_rows(np.concatenate([rows, seed_row[None, :]]))
    cells = hole_map(table, arc)
    assert [c.kind for c in cells] == [c.kind for c in hole_map(table, arc, method="brute")]
    by = {(c.x, c.z): c for c in cells}
    # a cell at the lattice's own centre bearing: dense
    centre = by[(-0.17, 0.18)]
    assert centre.kind == "dense" and abs(centre.resid_x) <= 0.010 and centre.max_dj <= 15.0
    # far corner: hole; its seed is the planted row (the only band row within 30 mm)
    far = by[(-0.31, 0.12)]
    assert far.kind == "hole" and far.seed_index == table.n_rows - 1
    assert far.seed_max_dj == pytest.approx(40.0)
    assert far.reason.startswith("out_of_range")
    s = summarize(cells)
    assert s["dense"] + s["marginal"] + s["holes"] == 195 and s["dense"] > 5 and s["holes"] > 100
    # marginal: found within dist_max but a residual above 10 mm
    for c in cells:
        if c.kind == "marginal":
            assert max(abs(c.resid_x), abs(c.resid_z)) > 0.010
    text = ascii_map(cells)
    lines = text.splitlines()
    assert len(lines) == 1 + 13 + 1 and all(
        len(line) == len("z 0.34 ") + 15 for line in lines[1:14]
    )
    assert "o" in text and "#" in text
    csv_text = cells_csv(cells)
    assert csv_text.count("\n") == 196 and "hole" in csv_text


def test_clusters_complete_linkage_chebyshev(arc) -> None:
    # seeds in two groups 40 degrees apart on j2, one group spanning 28 degrees on j4
    angles = np.array(
        [
            [10, 50, 0, 0, -80, -30],
            [12, 52, 2, 0, -60, -30],
            [14, 55, 5, 0, -52, -30],
            [20, 50, 40, 0, -80, -30],
            [22, 51, 41, 0, -79, -30],
        ],
        dtype=float,
    )
    table = FkTable.from_rows(rows_from_angles(angles))
    cells = [
        Cell(0, 0, "hole", None, None, None, None, None, i, tuple(angles[i]), 0.0) for i in range(5)
    ]
    clusters = cluster_seeds(table, cells)
    assert [sorted(c.members) for c in clusters] == [[0, 1, 2], [3, 4]]
    assert clusters[0].diameter == pytest.approx(28.0) and clusters[0].base == tuple(angles[1])
    # with a 20 degree diameter the first group splits
    assert len(cluster_seeds(table, cells, diameter=20.0)) == 3
    assert cluster_seeds(table, []) == []


def test_fill_adds_lattices_archives_and_closes_holes(tmp_path: Path, arc) -> None:
    path = tmp_path / "fk" / FK_TABLE
    rows = place_rows(j0s=(40.0,), steps=7)
    # a seed near (-0.25, 0.13): a pose inside the ±15 box of that cell's approach, planted alone
    ap = j0_lookup(arc, (-0.25, 0.13)).angles
    planted = rows_from_angles(np.array([[ap[0], ap[1] + 10, ap[2] - 5, ap[3], ap[4] + 5, ap[5]]]))
    build_table(path, np.concatenate([rows, planted]))
    table = load_table(path)
    cells = hole_map(table, arc)
    clusters = cluster_seeds(table, cells)
    assert clusters
    before = summarize(cells, clusters)
    with pytest.raises(ValueError, match="checksum"):
        fill_table(path, clusters, expect_checksum="0" * 64)
    out = fill_table(path, clusters, expect_checksum=table.checksum)
    assert out["rows_before"] == table.n_rows and out["rows_added"] > 0
    assert out["rows_after"] == out["rows_before"] + out["rows_added"]
    assert len(list((path.parent / "archive").glob("*.csv"))) == 1
    new = load_table(path)
    assert new.n_rows == out["rows_after"] and new.checksum == out["checksum"]
    # the old rows keep their row numbers; no duplicated poses were added
    assert np.array_equal(new.joints[: table.n_rows], table.joints)
    assert len(np.unique(new.joints, axis=0)) == new.n_rows
    after = summarize(hole_map(new, arc))
    assert after["holes"] < before["holes"] and after["dense"] > before["dense"]
