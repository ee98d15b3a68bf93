"""Fixtures of the lookup tests: small tables made on the spot, one default table per session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import structlog

from mecharm.runtime.lookup import FkTable, ensure_table, load_table
from mecharm.runtime.lookup.build import APPROACH_PLACE_BASE, lattice, rows_from_angles


@pytest.fixture(autouse=True)
def _restore_structlog() -> Iterator[None]:
    """The CLI configures structlog onto the (captured) stderr; later tests must not inherit it."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


def dyadic_table(n: int = 6000, seed: int = 0) -> FkTable:
    """Rows on a 1/256 m grid (exact arithmetic, so distance ties really happen).

    Joint angles are spread so every filter (limits, j1 <= 88, j3, j5, ref box)
    removes some rows; a block of exact duplicates tests the lowest-row tie rule.
    """
    rng = np.random.default_rng(seed)
    xyz = np.empty((n, 3))
    xyz[:, 0] = rng.integers(-80, 80, n) / 256
    xyz[:, 1] = rng.integers(0, 40, n) / 256
    xyz[:, 2] = rng.integers(0, 100, n) / 256
    joints = np.round(rng.uniform(-100, 100, (n, 6)), 1)
    joints[:, 1] = np.round(rng.uniform(60, 95, n), 1)  # some rows above the j1 <= 88 line
    joints[rng.random(n) < 0.02, 2] = 70.0  # beyond the SDK limit of j2 (65)
    joints[:, 3] = rng.integers(-20, 21, n)
    joints[:, 5] = rng.integers(-40, -19, n)
    rows = np.concatenate([xyz, joints], axis=1)
    dup = rows[:200].copy()
    dup[:, 3] += 1.0  # same position, other pose: ties in x-z
    return FkTable.from_rows(np.concatenate([rows, dup]))


@pytest.fixture(scope="module")
def dyadic() -> FkTable:
    return dyadic_table()


def place_rows(j0s: tuple[float, ...] = (30.0, 50.0), steps: int = 5) -> np.ndarray:
    """Lattices around the approach_place pose at a few j0 values (a small place table)."""
    return rows_from_angles(
        np.concatenate([lattice((j0, *APPROACH_PLACE_BASE), steps=steps) for j0 in j0s])
    )


@pytest.fixture(scope="session")
def default_table_path(fk_data_dir: Path) -> Path:
    """The suite's default table (tests/conftest.py builds it once for every worker).
    Read-only: a test that changes a table builds its own."""
    return ensure_table(fk_data_dir)


@pytest.fixture(scope="session")
def default_table(default_table_path: Path) -> FkTable:
    return load_table(default_table_path)
