"""Hole map, seeds, clusters and fill (docs/lookup.md): where the place lookup fails, and why.

Per cell of the PLACE grid: the approach pose from j0_lookup, then the stage-8
place lookup (band [0.070, 0.100), every joint within 15° of the approach,
ee_y floor 0.070). Cells are dense (x and z residual <= 10 mm), marginal (found,
residual larger) or holes. A hole's seed is the safe table row within 30 mm in
x-z, inside the band, whose j1..j5 are closest (max|Δ|) to the approach's.
Seeds are clustered (complete linkage, Chebyshev on j1..j5, diameter 30°); each
cluster is one base pose to scan next, and ``fill_table`` merges those lattices
into the table (archiving the old generation). The map itself only reads.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from mecharm.runtime.lookup.build import build_table, lattice, rows_from_angles
from mecharm.runtime.lookup.fk_lookup import fk_lookup
from mecharm.runtime.lookup.j0 import ArcPose, j0_lookup
from mecharm.runtime.lookup.table import FkTable, file_checksum, load_table

__all__ = [
    "CLUSTER_DIAMETER_DEG",
    "PLACE_GRID",
    "Cell",
    "Cluster",
    "ascii_map",
    "cells_csv",
    "cluster_seeds",
    "fill_table",
    "grid_points",
    "hole_map",
    "summarize",
]

#: (x_start, x_stop, z_start, z_stop, step) metres: 15 x 13 = 195 cells.
PLACE_GRID: tuple[float, float, float, float, float] = (-0.05, -0.33, 0.10, 0.34, 0.020)
PLACE_BAND: tuple[float, float] = (0.070, 0.100)
JOINT_TOL_DEG = 15.0
EE_Y_FLOOR = 0.070
DENSE_MM = 10.0
SEED_RADIUS_M = 0.030
CLUSTER_DIAMETER_DEG = 30.0


@dataclass(frozen=True)
class Cell:
    x: float
    z: float
    kind: str  # dense | marginal | hole
    resid_x: float | None
    resid_z: float | None
    max_dj: float | None
    reason: str | None
    approach: tuple[float, ...] | None
    seed_index: int | None
    seed_angles: tuple[float, ...] | None
    seed_max_dj: float | None


@dataclass(frozen=True)
class Cluster:
    label: int
    base: tuple[float, ...]  # the medoid seed's six angles
    members: tuple[int, ...]  # seed row numbers
    diameter: float


def grid_points(grid: Sequence[float] = PLACE_GRID) -> list[tuple[float, float]]:
    x0, x1, z0, z1, step = grid
    nx = round(abs(x1 - x0) / step) + 1
    nz = round(abs(z1 - z0) / step) + 1
    sx = 1.0 if x1 >= x0 else -1.0
    return [
        (round(x0 + sx * i * step, 6), round(z0 + k * step, 6))
        for k in range(nz)
        for i in range(nx)
    ]


def _seed(
    table: FkTable, x: float, z: float, approach: Sequence[float], band: tuple[float, float]
) -> tuple[int, float] | None:
    rows = table.index.window_rows(x, z, SEED_RADIUS_M, band[0], band[1])
    if rows.size == 0:
        return None
    dx = table.col("ee_x")[rows] - x
    dz = table.col("ee_z")[rows] - z
    rows = rows[(dx * dx + dz * dz <= SEED_RADIUS_M * SEED_RADIUS_M) & table.col("safe")[rows]]
    if rows.size == 0:
        return None
    dj = np.abs(table.joints[rows, 1:] - np.asarray(approach[1:])).max(axis=1)
    best = dj.min()
    return int(rows[dj == best].min()), float(best)


def hole_map(
    table: FkTable,
    arc: ArcPose,
    grid: Sequence[float] = PLACE_GRID,
    band: tuple[float, float] = PLACE_BAND,
    joint_tol: float = JOINT_TOL_DEG,
    ee_y_floor: float = EE_Y_FLOOR,
    dense_mm: float = DENSE_MM,
    method: str = "indexed",
) -> list[Cell]:
    """Classify every grid cell; read-only on the table."""
    cells = []
    for x, z in grid_points(grid):
        ap = j0_lookup(arc, (x, z))
        if not ap.ok:
            cells.append(
                Cell(
                    x, z, "hole", None, None, None, f"approach: {ap.reason}", None, None, None, None
                )
            )
            continue
        r = fk_lookup(
            table,
            "place_withblock",
            (x, z),
            band[0],
            band[1],
            ref_joints=ap.angles,
            joint_tol=joint_tol,
            ee_y_floor=ee_y_floor,
            method=method,
        )
        if r.ok:
            assert r.resid_x is not None and r.resid_z is not None
            dense = abs(r.resid_x) * 1000 <= dense_mm and abs(r.resid_z) * 1000 <= dense_mm
            cells.append(
                Cell(
                    x,
                    z,
                    "dense" if dense else "marginal",
                    r.resid_x,
                    r.resid_z,
                    r.max_dj,
                    None,
                    ap.angles,
                    None,
                    None,
                    None,
                )
            )
            continue
        seed = _seed(table, x, z, ap.angles, band)
        cells.append(
            Cell(
                x,
                z,
                "hole",
                r.resid_x,
                r.resid_z,
                r.max_dj,
                r.reason,
                ap.angles,
                None if seed is None else seed[0],
                None if seed is None else tuple(float(v) for v in table.joints[seed[0]]),
                None if seed is None else seed[1],
            )
        )
    return cells


def cluster_seeds(
    table: FkTable, cells: Sequence[Cell], diameter: float = CLUSTER_DIAMETER_DEG
) -> list[Cluster]:
    """Complete-linkage clusters of the seeds' j1..j5 under Chebyshev distance."""
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import pdist, squareform

    seeds = sorted({c.seed_index for c in cells if c.seed_index is not None})
    if not seeds:
        return []
    ang = table.joints[seeds]
    if len(seeds) == 1:
        labels = np.array([1])
    else:
        labels = fcluster(
            linkage(ang[:, 1:], method="complete", metric="chebyshev"),
            t=diameter,
            criterion="distance",
        )
    out = []
    # number clusters by their first seed row, so the output does not depend on scipy's labels
    firsts = sorted((int(np.flatnonzero(labels == lab)[0]), lab) for lab in set(labels.tolist()))
    for number, (_first, lab) in enumerate(firsts, start=1):
        members = np.flatnonzero(labels == lab)
        sub = ang[members, 1:]
        d = squareform(pdist(sub, "chebyshev")) if len(members) > 1 else np.zeros((1, 1))
        medoid = int(members[np.argmin(d.max(axis=1))])
        out.append(
            Cluster(
                label=number,
                base=tuple(float(v) for v in ang[medoid]),
                members=tuple(seeds[i] for i in members),
                diameter=float(d.max()),
            )
        )
    return out


def summarize(cells: Sequence[Cell], clusters: Sequence[Cluster] | None = None) -> dict[str, Any]:
    holes = [c for c in cells if c.kind == "hole"]
    out: dict[str, Any] = {
        "cells": len(cells),
        "dense": sum(c.kind == "dense" for c in cells),
        "marginal": sum(c.kind == "marginal" for c in cells),
        "holes": len(holes),
        "seeds": sum(c.seed_index is not None for c in holes),
        "without_seed": sum(c.seed_index is None for c in holes),
    }
    if clusters is not None:
        out["clusters"] = len(clusters)
    return out


def ascii_map(cells: Sequence[Cell]) -> str:
    """Rows from far (large z) to near, columns as the grid runs in x.

    ``#`` dense, ``+`` marginal, ``o`` hole with a seed, ``.`` hole without seed.
    """
    zs = sorted({c.z for c in cells}, reverse=True)
    xs = list(dict.fromkeys(c.x for c in cells))
    by = {(c.x, c.z): c for c in cells}
    sym = {"dense": "#", "marginal": "+"}
    lines = [f"x {xs[0]:+.2f} .. {xs[-1]:+.2f} ->"]
    for z in zs:
        row = "".join(
            sym.get(by[(x, z)].kind, "o" if by[(x, z)].seed_index is not None else ".") for x in xs
        )
        lines.append(f"z {z:.2f} {row}")
    lines.append("# dense  + marginal  o hole with seed  . hole without seed")
    return "\n".join(lines) + "\n"


def cells_csv(cells: Sequence[Cell]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(
        [
            "x",
            "z",
            "kind",
            "resid_x_mm",
            "resid_z_mm",
            "max_dj",
            "seed_index",
            "seed_max_dj",
            "seed_angles",
            "reason",
        ]
    )

    def mm(v: float | None) -> str:
        return "" if v is None else f"{v * 1000:.2f}"

    for c in cells:
        w.writerow(
            [
                f"{c.x:.3f}",
                f"{c.z:.3f}",
                c.kind,
                mm(c.resid_x),
                mm(c.resid_z),
                "" if c.max_dj is None else f"{c.max_dj:.2f}",
                "" if c.seed_index is None else c.seed_index,
                "" if c.seed_max_dj is None else f"{c.seed_max_dj:.2f}",
                "" if c.seed_angles is None else " ".join(f"{a:.3f}" for a in c.seed_angles),
                c.reason or "",
            ]
        )
    return buf.getvalue()


def _dedupe_new(old: NDArray[np.float64], new: NDArray[np.float64]) -> NDArray[np.float64]:
    """Rows of ``new`` whose joint angles are not already in ``old`` (nor earlier in ``new``)."""

    def keys(a: NDArray[np.float64]) -> NDArray[np.void]:
        k = np.ascontiguousarray(np.round(a[:, 3:] * 1000).astype(np.int64))
        return k.view(np.dtype((np.void, k.dtype.itemsize * 6))).ravel()

    k_old, k_new = keys(old), keys(new)
    _, first = np.unique(k_new, return_index=True)
    keep = np.zeros(len(new), dtype=bool)
    keep[first] = True
    keep &= ~np.isin(k_new, k_old)
    return new[keep]


def fill_table(
    path: Path, clusters: Sequence[Cluster], expect_checksum: str | None = None
) -> dict[str, Any]:
    """Scan ±15° lattices around the cluster bases and merge them into the table at ``path``.

    ``expect_checksum`` (the table the clusters were computed on) must match the
    file, so a plan is never merged into another generation. The old table is
    archived; the new one is written under the same name. Returns counts.
    """
    path = Path(path)
    table = load_table(path, verify=True)
    if expect_checksum is not None and table.checksum != expect_checksum:
        raise ValueError(
            f"table {path} has checksum {table.checksum[:12]}, the clusters were "
            f"computed on {expect_checksum[:12]}: recompute the hole map first"
        )
    old = np.concatenate([table.xyz, table.joints], axis=1)
    if not clusters:
        return {
            "rows_before": len(old),
            "rows_added": 0,
            "rows_after": len(old),
            "checksum": table.checksum,
        }
    new = rows_from_angles(np.concatenate([lattice(c.base) for c in clusters]))
    added = _dedupe_new(old, new)
    merged = np.concatenate([old, added])
    checksum = build_table(path, merged)
    if file_checksum(path) != checksum:
        raise ValueError(f"table {path} does not match the checksum just recorded")
    return {
        "rows_before": len(old),
        "rows_added": len(added),
        "rows_after": len(merged),
        "checksum": checksum,
        "previous_checksum": table.checksum,
    }
