"""Spatial index over the FK table: an x-z grid whose cells keep their rows sorted by ee_y.

Rows are ordered by the key ``cell << 32 | rank(ee_y)`` (ties by row number), so
the rows of one cell inside a half-open ee_y band are one contiguous run found by
two binary searches, exactly (ranks are positions in the sorted distinct ee_y
values, so ``ee_y >= lo`` is ``rank >= searchsorted(distinct, lo)``). A query
gathers the runs of the cells around the target and filters only those rows.
``by_y`` (row numbers in ee_y order) gives the exact band of the whole table for
the slow path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    from mecharm_runtime.lookup.table import FkTable

__all__ = ["CELL_M", "FkIndex"]

#: Grid cell edge in metres.
CELL_M = 0.0025
_SHIFT = np.int64(32)


@dataclass(eq=False)
class FkIndex:
    x0: float
    z0: float
    nx: int
    nz: int
    cell: float
    order: NDArray[np.int64]  # row numbers sorted by (cell, rank_y, row)
    keys: NDArray[np.int64]  # sorted keys
    ys: NDArray[np.float64]  # distinct ee_y values, ascending
    by_y: NDArray[np.int64]  # row numbers sorted by (ee_y, row)
    y_sorted: NDArray[np.float64]  # ee_y[by_y]

    @classmethod
    def build(cls, table: FkTable, cell: float = CELL_M) -> FkIndex:
        x = table.col("ee_x")
        z = table.col("ee_z")
        y = table.col("ee_y")
        x0 = float(np.floor(x.min() / cell) * cell) - cell
        z0 = float(np.floor(z.min() / cell) * cell) - cell
        nx = int((x.max() - x0) // cell) + 2
        nz = int((z.max() - z0) // cell) + 2
        ix = np.clip(((x - x0) // cell).astype(np.int64), 0, nx - 1)
        iz = np.clip(((z - z0) // cell).astype(np.int64), 0, nz - 1)
        ys, rank = np.unique(y, return_inverse=True)
        keys = ((ix * nz + iz) << _SHIFT) | rank.astype(np.int64)
        order = np.argsort(keys, kind="stable")
        by_y = np.argsort(y, kind="stable")
        return cls(x0, z0, nx, nz, cell, order, keys[order], ys, by_y, y[by_y])

    def arrays(self) -> dict[str, NDArray[Any]]:
        grid = np.array([self.x0, self.z0, self.nx, self.nz, self.cell])
        return {"grid": grid, "order": self.order, "keys": self.keys, "ys": self.ys,
                "by_y": self.by_y, "y_sorted": self.y_sorted}

    @classmethod
    def from_arrays(cls, table: FkTable, a: dict[str, NDArray[Any]]) -> FkIndex:
        g = a["grid"]
        idx = cls(float(g[0]), float(g[1]), int(g[2]), int(g[3]), float(g[4]), a["order"], a["keys"],
                  a["ys"], a["by_y"], a["y_sorted"])
        if idx.order.shape[0] != table.n_rows:
            raise ValueError("index size does not match the table")
        return idx

    def _ranks(self, y_lo: float, y_hi: float) -> tuple[int, int]:
        """Rank bounds of a band (rows with ee_y in [y_lo, y_hi) have rank in [lo, hi))."""
        cache = self.__dict__.setdefault("_rank_cache", {})
        r = cache.get((y_lo, y_hi))
        if r is None:
            r = (int(np.searchsorted(self.ys, y_lo, "left")), int(np.searchsorted(self.ys, y_hi, "left")))
            if len(cache) > 256:
                cache.clear()
            cache[(y_lo, y_hi)] = r
        return r

    def _template(self, nix: int, niz: int) -> NDArray[np.int64]:
        """Key offsets (cell << 32) of an nix x niz block of cells, relative to its first cell."""
        cache = self.__dict__.setdefault("_templates", {})
        t = cache.get((nix, niz))
        if t is None:
            t = ((np.arange(nix, dtype=np.int64)[:, None] * self.nz
                  + np.arange(niz, dtype=np.int64)[None, :]).ravel() << 32)
            cache[(nix, niz)] = t
        return t

    def band_rows(self, y_lo: float, y_hi: float) -> NDArray[np.int64]:
        """Row numbers with y_lo <= ee_y < y_hi (in ee_y order, not ascending)."""
        a = int(np.searchsorted(self.y_sorted, y_lo, "left"))
        b = int(np.searchsorted(self.y_sorted, y_hi, "left"))
        return self.by_y[a:b]

    def ycol(self, table: FkTable, name: str) -> NDArray[Any]:
        """One column in ee_y order (built on first use): a band is then a contiguous slice."""
        cols = self.__dict__.setdefault("_ycols", {})
        col = cols.get(name)
        if col is None:
            col = table.col(name)[self.by_y]
            cols[name] = col
        return col

    def band_slice(self, y_lo: float, y_hi: float) -> slice:
        a = int(np.searchsorted(self.y_sorted, y_lo, "left"))
        b = int(np.searchsorted(self.y_sorted, y_hi, "left"))
        return slice(a, b)

    def band_count(self, y_lo: float, y_hi: float) -> int:
        return int(np.searchsorted(self.y_sorted, y_hi, "left") - np.searchsorted(self.y_sorted, y_lo, "left"))

    def window_rows(self, tx: float, tz: float, half: float, y_lo: float, y_hi: float) -> NDArray[np.int64]:
        """Rows in the band whose cell meets the square |x-tx| <= half, |z-tz| <= half.

        Every row of the band outside the result has |dx| > half - 1e-12 or
        |dz| > half - 1e-12 (the slack covers rounding in the cell arithmetic).
        """
        c = self.cell
        ix_lo = int((tx - half - self.x0) // c)
        ix_hi = int((tx + half - self.x0) // c)
        iz_lo = int((tz - half - self.z0) // c)
        iz_hi = int((tz + half - self.z0) // c)
        r_lo, r_hi = self._ranks(y_lo, y_hi)
        if r_lo >= r_hi:
            return np.empty(0, dtype=np.int64)
        ix_lo, ix_hi = max(ix_lo, 0), min(ix_hi, self.nx - 1)
        iz_lo, iz_hi = max(iz_lo, 0), min(iz_hi, self.nz - 1)
        if ix_lo > ix_hi or iz_lo > iz_hi:
            return np.empty(0, dtype=np.int64)
        tmpl = self._template(ix_hi - ix_lo + 1, iz_hi - iz_lo + 1)
        lo_keys = tmpl + (((ix_lo * self.nz + iz_lo) << 32) | r_lo)
        bounds = np.searchsorted(self.keys, np.concatenate((lo_keys, lo_keys + (r_hi - r_lo))), "left")
        k = lo_keys.size
        lo = bounds[:k]
        n = bounds[k:] - lo
        total = int(n.sum())
        if total == 0:
            return np.empty(0, dtype=np.int64)
        pos = np.arange(total, dtype=np.int64) + np.repeat(lo - (np.cumsum(n) - n), n)
        return self.order[pos]
