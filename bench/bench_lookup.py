"""Lookup benchmarks: each figure against its reference measured in the same run.

- default table build (ensure_table) and cold load: CSV parse vs binary cache;
- fk_lookup p50/p99, indexed vs the rig's own method (a vectorised ee_y band filter, the
  other filters on the band's rows, nearest in x-z: ``method="rig"``), the speed
  baseline, for pick queries and for place queries with ref_joints (the approach pose,
  tol 15°, floor 0.070); both checked against the independent full-mask scan ("brute");
- the full 195-cell hole map, indexed vs the rig's method;
- fk_tip on 1M poses vs the 4x4-matrix chain it replaced;
- coverage of the PICK / PLACE regions (5 mm grid, residual <= 5 / <= 10 mm).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import Row, has
from mecharm.common.kinematics import JOINT_ORIGINS, TOOL_OFFSET_M, fk_tip, urdf_to_unity
from mecharm.runtime.lookup import FkTable, ensure_table, fk_lookup, j0_lookup, load_arc, load_table
from mecharm.runtime.lookup.j0 import DEFAULT_PICK_ARC, DEFAULT_PLACE_ARC
from mecharm.runtime.lookup.table import read_csv_rows
from mecharm.tools.fktable.holes import hole_map, summarize

__all__ = ["run"]


def _pct(ts: list[float]) -> dict[str, float]:
    a = np.asarray(ts) * 1000
    return {
        "p50_ms": round(float(np.percentile(a, 50)), 4),
        "p99_ms": round(float(np.percentile(a, 99)), 4),
    }


def _matrix_fk_tip(angles: np.ndarray) -> np.ndarray:
    """The previous fk_tip: a stack of 4x4 products per joint (the baseline)."""

    def rpy(r: float, p: float, y: float) -> np.ndarray:
        cr, sr, cp, sp, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
        return (
            np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
            @ np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
            @ np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
        )

    origins = []
    for xyz, r in JOINT_ORIGINS:
        t = np.eye(4)
        t[:3, :3] = rpy(*r)
        t[:3, 3] = xyz
        origins.append(t)
    q = np.radians(angles)
    n = q.shape[0]
    t = np.broadcast_to(np.eye(4), (n, 4, 4)).copy()
    c, s = np.cos(q), np.sin(q)
    for i in range(6):
        rz = np.zeros((n, 4, 4))
        rz[:, 0, 0], rz[:, 0, 1], rz[:, 1, 0], rz[:, 1, 1] = c[:, i], -s[:, i], s[:, i], c[:, i]
        rz[:, 2, 2] = rz[:, 3, 3] = 1.0
        t = t @ origins[i] @ rz
    return urdf_to_unity(t[:, :3, 3] + t[:, :3, 2] * TOOL_OFFSET_M)


def _queries(
    table: FkTable, n: int, seed: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rng = np.random.default_rng(seed)
    arc = load_arc(DEFAULT_PLACE_ARC)
    pick, place = [], []
    for _ in range(n):
        pick.append(
            {
                "phase": "pick",
                "target_xz": (float(rng.uniform(0.14, 0.24)), float(rng.uniform(0.20, 0.28))),
                "ee_y_min": 0.010,
                "ee_y_max": 0.040,
            }
        )
        t = (float(rng.uniform(-0.24, -0.14)), float(rng.uniform(0.14, 0.24)))
        place.append(
            {
                "phase": "place_withblock",
                "target_xz": t,
                "ee_y_min": 0.070,
                "ee_y_max": 0.100,
                "ref_joints": j0_lookup(arc, t).angles,
                "joint_tol": 15.0,
                "ee_y_floor": 0.070,
            }
        )
    return pick, place


def _time_lookups(
    table: FkTable, qs: list[dict[str, Any]], method: str
) -> tuple[list[float], list[Any]]:
    ts, res = [], []
    for q in qs:
        t0 = time.perf_counter()
        r = fk_lookup(table, method=method, **q)
        ts.append(time.perf_counter() - t0)
        res.append(r.selected_index if r.ok else (None, r.nearest_index))
    return ts, res


def _coverage(table: FkTable) -> dict[str, Any]:
    pick_arc, place_arc = load_arc(DEFAULT_PICK_ARC), load_arc(DEFAULT_PLACE_ARC)
    out: dict[str, Any] = {}
    for name, (x0, x1, z0, z1) in {
        "pick": (0.14, 0.24, 0.20, 0.28),
        "place": (-0.24, -0.14, 0.14, 0.24),
    }.items():
        d = []
        for x in np.arange(x0, x1 + 1e-9, 0.005):
            for z in np.arange(z0, z1 + 1e-9, 0.005):
                t = (float(x), float(z))
                if name == "pick":
                    assert j0_lookup(pick_arc, t).ok
                    r = fk_lookup(table, "pick", t, 0.010, 0.040)
                else:
                    ap = j0_lookup(place_arc, t)
                    r = fk_lookup(
                        table,
                        "place_withblock",
                        t,
                        0.070,
                        0.100,
                        ref_joints=ap.angles,
                        joint_tol=15.0,
                        ee_y_floor=0.070,
                    )
                d.append(r.distance if r.ok else np.inf)
        a = np.asarray(d)
        out[f"coverage_{name}"] = {
            "cells": a.size,
            "le_5mm": round(float(np.mean(a <= 0.005)), 3),
            "le_10mm": round(float(np.mean(a <= 0.010)), 3),
            "ok": round(float(np.mean(np.isfinite(a))), 3),
            "max_ok_mm": round(float(a[np.isfinite(a)].max() * 1000), 1),
        }
    return out


def run(quick: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    tmp = Path(tempfile.mkdtemp(prefix="bench_lookup_"))
    try:
        t0 = time.perf_counter()
        path = ensure_table(tmp)
        out["build_default_table_s"] = round(time.perf_counter() - t0, 2)

        t0 = time.perf_counter()
        rows = read_csv_rows(path)
        FkTable.from_rows(rows)
        csv_s = time.perf_counter() - t0
        loads = []
        for _ in range(3):
            t0 = time.perf_counter()
            table = load_table(path)
            loads.append(time.perf_counter() - t0)
        out["table_rows"] = table.n_rows
        out["load_csv_parse_ms"] = round(csv_s * 1000, 1)
        out["load_cache_ms"] = round(min(loads) * 1000, 1)
        out["load_speedup"] = round(csv_s / min(loads), 1)

        n = 200 if quick else 1000
        n_brute = 20 if quick else 100
        pick, place = _queries(table, n, seed=11)
        for name, qs in (("pick", pick), ("place_ref", place)):
            _time_lookups(table, qs[:20], "indexed")  # warm-up (lazy columns)
            ti, ri = _time_lookups(table, qs, "indexed")
            tr, rr = _time_lookups(table, qs[:n_brute], "rig")
            tb, rb = _time_lookups(table, qs[:n_brute], "brute")
            if ri[:n_brute] != rb or rr != rb:
                raise AssertionError(f"{name}: indexed, the rig's method and brute disagree")
            ok_t = [t for t, r in zip(ti, ri, strict=True) if not isinstance(r, tuple)]
            out[f"fk_lookup_{name}_indexed"] = {
                **_pct(ti),
                "ok_only": _pct(ok_t) if ok_t else None,
                "ok_fraction": round(len(ok_t) / len(ti), 3),
            }
            out[f"fk_lookup_{name}_rig"] = _pct(tr)  # the baseline: the rig's own method
            out[f"fk_lookup_{name}_brute"] = _pct(tb)  # the independent check, not a baseline
            out[f"fk_lookup_{name}_speedup_p50"] = round(float(np.median(tr) / np.median(ti)), 1)

        arc = load_arc(DEFAULT_PLACE_ARC)
        hole_map(table, arc)  # warm-up
        t0 = time.perf_counter()
        cells = hole_map(table, arc)
        hi = time.perf_counter() - t0
        out["hole_map_indexed_s"] = round(hi, 3)
        out["hole_map_summary"] = summarize(cells)
        if not quick:
            t0 = time.perf_counter()
            cells_b = hole_map(table, arc, method="rig")
            hb = time.perf_counter() - t0
            if [c.kind for c in cells_b] != [c.kind for c in cells]:
                raise AssertionError("hole map: indexed and the rig's method disagree")
            out["hole_map_rig_s"] = round(hb, 3)
            out["hole_map_speedup"] = round(hb / hi, 1)

        q = np.random.default_rng(0).uniform(-90, 90, (200_000 if quick else 1_000_000, 6))
        t0 = time.perf_counter()
        new = fk_tip(q)
        tn = time.perf_counter() - t0
        t0 = time.perf_counter()
        old = _matrix_fk_tip(q)
        to = time.perf_counter() - t0
        if not np.allclose(new, old, atol=1e-12):
            raise AssertionError("fk_tip disagrees with the matrix chain")
        out["fk_tip_rows"] = q.shape[0]
        out["fk_tip_s"] = round(tn, 3)
        out["fk_tip_matrix_chain_s"] = round(to, 3)
        out["fk_tip_speedup"] = round(to / tn, 1)

        out.update(_coverage(table))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


#: `make bench` runs this bench a second time beside CPU burners (a hot path)
UNDER_LOAD = True


def rows(result: dict[str, Any]) -> list[Row]:
    """The table's lines: each figure against the rig's own method (or the CSV, the old
    matrix chain) measured in the same run."""
    r, out = result, []
    if has(r, "load_cache_ms", "load_csv_parse_ms", "table_rows"):
        out.append(
            Row(
                "lookup",
                f"table cold load ({r['table_rows']:,} rows)",
                f"{r['load_cache_ms']} ms from the cache",
                "tens of ms",
                f"CSV parse {r['load_csv_parse_ms']} ms ({r.get('load_speedup', '?')}x)",
            )
        )
    for name, label in (("pick", "pick"), ("place_ref", "place with ref_joints")):
        ix, rig = f"fk_lookup_{name}_indexed", f"fk_lookup_{name}_rig"
        if has(r, ix, rig):
            out.append(
                Row(
                    "lookup",
                    f"`fk_lookup` {label}",
                    f"p50 {r[ix]['p50_ms']} ms, p99 {r[ix]['p99_ms']} ms",
                    "p50 <= 0.1 ms",
                    f"the rig's method p50 {r[rig]['p50_ms']} ms "
                    f"({r.get(f'fk_lookup_{name}_speedup_p50', '?')}x)",
                )
            )
    if has(r, "hole_map_indexed_s", "hole_map_rig_s"):
        cells = (r.get("hole_map_summary") or {}).get("cells", "?")
        out.append(
            Row(
                "lookup",
                f"hole map, {cells} cells",
                f"{r['hole_map_indexed_s']} s",
                "<= 1 s",
                f"the rig's method {r['hole_map_rig_s']} s ({r.get('hole_map_speedup', '?')}x)",
            )
        )
    if has(r, "fk_tip_s", "fk_tip_matrix_chain_s", "fk_tip_rows"):
        out.append(
            Row(
                "lookup",
                f"`fk_tip` on {r['fk_tip_rows']:,} poses",
                f"{r['fk_tip_s']} s",
                "—",
                f"4x4 matrix chain {r['fk_tip_matrix_chain_s']} s ({r.get('fk_tip_speedup', '?')}x)",
            )
        )
    return out
