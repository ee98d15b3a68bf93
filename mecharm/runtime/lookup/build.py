"""The table builder: ±15° lattices around base poses plus a coarse global scan.

Like the rig (docs/lookup.md): each base pose contributes 7 steps of 5° on j0..j4 — 16,807
rows (j5 stays at the base value: it turns the gripper about its own axis and
does not move the tip). The default base poses serve the PICK and PLACE regions
of the workcell (docs/lookup.md lists them and their coverage); the global scan
gives every reachable place a few candidates. Everything is plain arithmetic on
fixed numbers, so the default table is the same file, byte for byte, every time.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import itertools
import json
import math
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from mecharm.common.kinematics import TOOL_OFFSET_M, fk_tip
from mecharm.common.layout import FkTableFiles
from mecharm.common.logging import get_logger
from mecharm.runtime.lookup.table import (
    FkTable,
    archive_table,
    default_table_path,
    save_cache,
    write_table,
)

__all__ = [
    "APPROACH_LATTICE_J0_STEP",
    "APPROACH_PICK_BASE",
    "APPROACH_PLACE_BASE",
    "DEFAULT_BASES",
    "LATTICE_HALF_DEG",
    "LATTICE_STEPS",
    "approach_lattice_bases",
    "build_table",
    "default_rows",
    "ensure_table",
    "global_scan",
    "lattice",
    "rows_from_angles",
    "warmed",
    "with_approach_lattices",
]

log = get_logger("mecharm.lookup.build")

LATTICE_HALF_DEG = 15.0
LATTICE_STEPS = 7

#: Adopted approach poses of the rig (j1..j5): docs/lookup.md, "j0_lookup and the adopted arcs".
APPROACH_PICK_BASE: tuple[float, ...] = (87.74, -38.33, 3.6, -70.11, -30.0)
APPROACH_PLACE_BASE: tuple[float, ...] = (57.39, 17.49, 0.08, -89.2, -29.44)

# Pick bases: tip at ee_y 0.025 m and 0.26 / 0.30 / 0.34 m from the base axis
# (solved once with the kinematic model, gripper roll j3 = 0), turned to bearings
# -28 / -38 / -48 degrees, each also shifted by +2.5 degrees on j0..j4 so the two
# lattices interleave.
_PICK_ARMS = (
    (52.97, 22.57, 0.0, -53.56, -30.0),
    (68.18, -5.55, 0.0, -45.72, -30.0),
    (80.0, -50.37, 0.0, -3.48, -30.0),
)
_PICK_J0 = (-28.0, -38.0, -48.0)
# Place bases: the approach_place pose itself turned to j0 = 20..80 every 10 degrees
# (its ±15 degree lattice is exactly the joint_tol box of descend_place), plus the same
# shifted by ±2.5 degrees on j1, j2, j4.
_PLACE_J0 = (20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0)
_SHIFT = 2.5


def _default_bases() -> tuple[tuple[float, ...], ...]:
    bases: list[tuple[float, ...]] = []
    for j0 in _PICK_J0:
        for arm in _PICK_ARMS:
            b: tuple[float, ...] = (j0, *arm)
            bases.append(b)
            bases.append(tuple(v + _SHIFT if i < 5 else v for i, v in enumerate(b)))
    for j0 in _PLACE_J0:
        b = (j0, *APPROACH_PLACE_BASE)
        bases.append(b)
        for s in (_SHIFT, -_SHIFT):
            bases.append(tuple(v + s if i in (1, 2, 4) else v for i, v in enumerate(b)))
    return tuple(bases)


DEFAULT_BASES: tuple[tuple[float, ...], ...] = _default_bases()

#: Coarse global scan: (start, stop, step) per joint j0..j4; j5 fixed at -30.
GLOBAL_SCAN: tuple[tuple[float, float, float], ...] = (
    (-160.0, 160.0, 20.0),
    (-75.0, 120.0, 15.0),
    (-175.0, 65.0, 20.0),
    (-150.0, 150.0, 50.0),
    (-115.0, 115.0, 23.0),
)
GLOBAL_J5 = -30.0


def lattice(
    base: Sequence[float], half_deg: float = LATTICE_HALF_DEG, steps: int = LATTICE_STEPS
) -> NDArray[np.float64]:
    """Angles (steps**5, 6): base ± half_deg in ``steps`` steps on j0..j4, j5 fixed."""
    b = np.asarray(base, dtype=np.float64)
    if b.shape != (6,):
        raise ValueError(f"base pose must have 6 angles, got {b.shape}")
    grid = _offsets(float(half_deg), int(steps))
    q = np.empty((grid.shape[0], 6))
    q[:, :5] = grid + b[:5]
    q[:, 5] = b[5]
    return q


@functools.lru_cache(maxsize=4)
def _offsets(half_deg: float, steps: int) -> NDArray[np.float64]:
    offs = np.linspace(-half_deg, half_deg, steps)
    grid = np.array(list(itertools.product(offs, repeat=5)))
    grid.setflags(write=False)
    return grid


def global_scan() -> NDArray[np.float64]:
    axes = [np.arange(a, b + 1e-9, s) for a, b, s in GLOBAL_SCAN]
    mesh = np.meshgrid(*axes, indexing="ij")
    q = np.empty((mesh[0].size, 6))
    for i, m in enumerate(mesh):
        q[:, i] = m.ravel()
    q[:, 5] = GLOBAL_J5
    return q


def rows_from_angles(
    angles: NDArray[np.float64], tool_m: float = TOOL_OFFSET_M
) -> NDArray[np.float64]:
    """Table rows (n, 9) for joint angles: tip by FK, quantized to 1 µm and 0.001°."""
    q = np.round(np.asarray(angles, dtype=np.float64) * 1000.0) / 1000.0
    tip = np.round(fk_tip(q, tool_m) * 1e6) / 1e6
    return np.concatenate([tip, q], axis=1)


def default_rows(
    bases: Sequence[Sequence[float]] = DEFAULT_BASES, with_global: bool = True
) -> NDArray[np.float64]:
    parts = [lattice(b) for b in bases]
    if with_global:
        parts.append(global_scan())
    return rows_from_angles(np.concatenate(parts))


def build_table(path: Path, rows: NDArray[np.float64]) -> str:
    """Write ``rows`` as the table at ``path``, archiving an existing one first. Returns sha256."""
    path = Path(path)
    archived = archive_table(path)
    checksum = write_table(path, rows)
    log.info(
        "fk_table_built",
        path=str(path),
        n_rows=int(rows.shape[0]),
        checksum=checksum,
        archived=str(archived) if archived else None,
    )
    return checksum


def ensure_table(data_dir: Path) -> Path:
    """Return ``{data_dir}/fk/fk_table.csv``, building the default table if it is missing.

    A fresh table is also loaded once so its binary cache exists for the next load.
    """
    path = default_table_path(data_dir)
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    # two processes starting on one data root: the second waits and finds the table
    with open(FkTableFiles(path).lock, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.is_file():
            rows = default_rows()
            checksum = build_table(path, rows)
            # the CSV parses back to exactly ``rows`` (shortest round-trip floats), so the
            # cache is made from them directly instead of parsing the file just written
            save_cache(path, FkTable.from_rows(rows, checksum=checksum, path=path))
    return path


# ---- approach lattices: continuous descents (docs/safety.md, "Joint continuity")

#: j0 spacing of the lattices around an approach arc: 10° apart with ±15° each, so every
#: j0 of the arc has lattice rows on a 5° grid up to 15° either side.
APPROACH_LATTICE_J0_STEP = 10.0
_AUGMENTED: dict[tuple[Any, ...], FkTable] = {}
_AUGMENT_LOCK = threading.Lock()


def _content_key(table: FkTable) -> tuple[Any, ...]:
    """What identifies a table's rows without hashing them all: its checksum, size, limit and
    a sample of its rows. Two loads of one file (a service's sessions, each test's rig, each
    trace of a replay) share one augmented table, and with it its index, instead of
    building ~1 s of lattices and index per load."""
    step = max(1, table.n_rows // 256)
    sample = hashlib.sha256(table.xyz[::step].tobytes() + table.joints[::step].tobytes())
    return (table.checksum, table.n_rows, table.j1_max, sample.hexdigest())


_WARMED: dict[tuple[Any, ...], FkTable] = {}


def warmed(table: FkTable, bands: Sequence[tuple[float, float]]) -> FkTable:
    """``table`` warmed for ``bands`` (``FkTable.warm``: its columns, safety mask, index and
    band views), or the table of the same file and content this process warmed before: a
    session's rig, each test's rig, each replayed trace loads the table again, and the
    warm-up (~0.15 s of CPU on the default table, more on a busy machine) was done again
    for every one. The derived arrays are pure functions of the rows and the j1 limit."""
    key = (str(table.path), *_content_key(table), tuple((float(a), float(b)) for a, b in bands))
    with _AUGMENT_LOCK:
        hit = _WARMED.get(key)
    if hit is not None:
        return hit
    table.warm(bands)
    with _AUGMENT_LOCK:
        while len(_WARMED) >= 4:
            del _WARMED[next(iter(_WARMED))]
        return _WARMED.setdefault(key, table)


def approach_lattice_bases(
    base_j1_j5: Sequence[float], j0_range: tuple[float, float]
) -> tuple[tuple[float, ...], ...]:
    """Base poses (j0, *base_j1_j5) every ``APPROACH_LATTICE_J0_STEP`` degrees covering
    ``j0_range`` (rounded outwards to the step)."""
    step = APPROACH_LATTICE_J0_STEP
    lo = math.floor(min(j0_range) / step) * step
    hi = math.ceil(max(j0_range) / step) * step
    n = round((hi - lo) / step) + 1
    return tuple((lo + i * step, *(float(v) for v in base_j1_j5)) for i in range(n))


def with_approach_lattices(
    table: FkTable, base_j1_j5: Sequence[float], j0_range: tuple[float, float]
) -> FkTable:
    """``table`` plus ±15° lattices around an approach arc's poses, appended after its rows.

    Why: the default table's pick rows are lattices around poses at the block, so no row
    within reach of a pick target keeps every joint within the continuity bound of the
    approach pose above it; the rig grew its place rows the same way (a lattice around
    the approach pose). The rows are added in memory, not to the file: the file's bytes
    (and so its checksum, which every recorded trace names) stay those of the default
    table, and row numbers below ``table.n_rows`` keep their meaning. The result is
    deterministic (same rows, same derived checksum) and cached per table and arc.
    """
    bases = approach_lattice_bases(base_j1_j5, j0_range)
    key = (*_content_key(table), bases)
    with _AUGMENT_LOCK:
        hit = _AUGMENTED.get(key)
        if hit is not None:
            return hit
        extra = rows_from_angles(np.concatenate([lattice(b) for b in bases]))
        rows = np.concatenate([np.concatenate([table.xyz, table.joints], axis=1), extra])
        tag = json.dumps({"table": table.checksum, "approach_lattices": bases})
        checksum = hashlib.sha256(tag.encode()).hexdigest()
        out = FkTable.from_rows(rows, checksum=checksum, path=table.path, j1_max=table.j1_max)
        while len(_AUGMENTED) >= 4:
            del _AUGMENTED[next(iter(_AUGMENTED))]
        _AUGMENTED[key] = out
        log.info(
            "fk_table_approach_lattices",
            base_checksum=table.checksum,
            checksum=checksum,
            lattices=len(bases),
            added_rows=int(extra.shape[0]),
        )
        return out
