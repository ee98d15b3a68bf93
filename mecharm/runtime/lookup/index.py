"""Spatial index over the FK table: an x-z grid whose cells keep their rows sorted by ee_y.

Rows are ordered by the key ``cell << 32 | rank(ee_y)`` (ties by row number), so
the rows of one cell inside a half-open ee_y band are one contiguous run found by
two binary searches, exactly (ranks are positions in the sorted distinct ee_y
values, so ``ee_y >= lo`` is ``rank >= searchsorted(distinct, lo)``). A query
gathers the runs of the cells around the target and filters only those rows.
``by_y`` (row numbers in ee_y order) gives the exact band of the whole table for
the slow path.

A band asked for again (the runtime and the hole map use a few fixed bands) gets
a ``BandView``: its rows that pass the safety mask, in the same (cell, rank, row)
order, with their x-z and joints copied alongside. A column of cells is then one
contiguous slice of those arrays, so a window is a handful of slices: no binary
searches, no gathers, no safety test per query.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    from mecharm.runtime.lookup.table import FkTable

__all__ = ["CELL_M", "MAX_VIEWS", "BandView", "FkIndex"]

#: Grid cell edge in metres.
CELL_M = 0.0025
_SHIFT = np.int64(32)
_RANK_MASK = np.int64((1 << 32) - 1)
#: Band views kept per index (least recently used dropped): 72 bytes per safe row in the band,
#: 144 once an out_of_range query with ref_joints has made its j0-sorted copy.
MAX_VIEWS = 4


@dataclass(eq=False)
class BandView:
    """The safe rows of one half-open ee_y band, ordered by (cell, ee_y rank, row).

    ``data`` holds one row per quantity (``X, Z``, joints ``J0..J0+5``, table row
    number ``ROW`` as an exact float), so a window is one ``np.concatenate`` of
    column slices and every element-wise test runs on contiguous memory (numpy is
    several times slower on the 6-wide inner loop of an (n, 6) array).
    ``starts[c]:starts[c + 1]`` are the positions of cell ``c`` (= ix * nz + iz): the
    cells ``(ix, iz_lo..iz_hi)`` of one grid column are one slice.
    """

    X: ClassVar[int] = 0
    Z: ClassVar[int] = 1
    J0: ClassVar[int] = 2
    ROW: ClassVar[int] = 8

    n_band: int  # rows in the band before the safety mask
    data: NDArray[np.float64]  # (9, m)
    starts: array  # (nx * nz + 1,) int64 cell offsets; array.array indexes ~3x faster than numpy

    @property
    def size(self) -> int:
        return int(self.data.shape[1])

    def by_j0(self) -> NDArray[np.float64]:
        """``data`` sorted by j0 (built on first use): rows within a j0 interval are one
        slice, which the out_of_range scan with ref_joints needs instead of the whole band."""
        s = self.__dict__.get("_by_j0")
        if s is None:
            s = np.ascontiguousarray(self.data[:, np.argsort(self.data[self.J0], kind="stable")])
            self.__dict__["_by_j0"] = s
        return s

    def window(self, idx: FkIndex, tx: float, tz: float, half: float) -> NDArray[np.float64] | None:
        """``data`` of the cells meeting the square |x-tx|, |z-tz| <= half, or None if empty."""
        cells = idx.cell_range(tx, tz, half)
        if cells is None:
            return None
        ix_lo, ix_hi, iz_lo, iz_hi = cells
        starts, nz, h = self.starts, idx.nz, iz_hi - iz_lo + 1
        runs = [
            (starts[c], starts[c + h])
            for c in range(ix_lo * nz + iz_lo, ix_hi * nz + iz_lo + 1, nz)
        ]
        runs = [r for r in runs if r[0] < r[1]]
        if not runs:
            return None
        if len(runs) == 1:
            return self.data[:, runs[0][0] : runs[0][1]]
        return np.concatenate([self.data[:, a:b] for a, b in runs], axis=1)


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
    #: A band gets its BandView on this request (lookups); 1 = always, 0 = never (tests pin a path).
    view_after: int = 2

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
        return {
            "grid": grid,
            "order": self.order,
            "keys": self.keys,
            "ys": self.ys,
            "by_y": self.by_y,
            "y_sorted": self.y_sorted,
        }

    @classmethod
    def from_arrays(cls, table: FkTable, a: dict[str, NDArray[Any]]) -> FkIndex:
        g = a["grid"]
        idx = cls(
            float(g[0]),
            float(g[1]),
            int(g[2]),
            int(g[3]),
            float(g[4]),
            a["order"],
            a["keys"],
            a["ys"],
            a["by_y"],
            a["y_sorted"],
        )
        if idx.order.shape[0] != table.n_rows:
            raise ValueError("index size does not match the table")
        return idx

    def cell_range(self, tx: float, tz: float, half: float) -> tuple[int, int, int, int] | None:
        """Cell bounds (ix_lo, ix_hi, iz_lo, iz_hi), inclusive, of the square |x-tx|, |z-tz| <= half.

        Every row in a cell outside them has |dx| > half - 1e-12 or |dz| > half - 1e-12
        (the slack covers rounding in the cell arithmetic). None if the square misses the grid.
        """
        c = self.cell
        ix_lo = max(int((tx - half - self.x0) // c), 0)
        ix_hi = min(int((tx + half - self.x0) // c), self.nx - 1)
        iz_lo = max(int((tz - half - self.z0) // c), 0)
        iz_hi = min(int((tz + half - self.z0) // c), self.nz - 1)
        if ix_lo > ix_hi or iz_lo > iz_hi:
            return None
        return ix_lo, ix_hi, iz_lo, iz_hi

    def band_view(
        self, table: FkTable, y_lo: float, y_hi: float, *, build: bool | None = None
    ) -> BandView | None:
        """The ``BandView`` of [y_lo, y_hi), or None while the band has been asked for once only.

        ``build`` True builds it now, False never; None (lookups) builds on request
        number ``view_after`` (default the second), so one-off bands do not pay the build
        (a few ms on a 1M-row table) and are searched through the whole-table grid.
        """
        views: dict[tuple[float, float], BandView] = self.__dict__.setdefault("_views", {})
        key = (y_lo, y_hi)
        view = views.pop(key, None)
        if view is None:
            if build is None:
                uses = self.__dict__.setdefault("_band_uses", {})
                if len(uses) > 256:
                    uses.clear()
                uses[key] = uses.get(key, 0) + 1
                build = 0 < self.view_after <= uses[key]
            if not build:
                return None
            view = self._build_view(table, y_lo, y_hi)
            while len(views) >= MAX_VIEWS:
                del views[next(iter(views))]
        views[key] = view  # (re)inserted last: the dict's order is the recency order
        return view

    def _build_view(self, table: FkTable, y_lo: float, y_hi: float) -> BandView:
        srank = self.__dict__.get("_safe_rank")
        if srank is None:  # rank of each sorted position, -1 where the row fails the safety mask
            srank = np.where(table.col("safe")[self.order], self.keys & _RANK_MASK, -1)
            self.__dict__["_safe_rank"] = srank
        r_lo, r_hi = self._ranks(y_lo, y_hi)
        pos = np.flatnonzero((srank >= r_lo) & (srank < r_hi))
        rows = self.order[pos]
        data = np.empty((9, rows.size))
        data[BandView.X] = table.col("ee_x")[rows]
        data[BandView.Z] = table.col("ee_z")[rows]
        data[BandView.J0 : BandView.J0 + 6] = table.joints[rows].T
        data[BandView.ROW] = rows
        starts = np.zeros(self.nx * self.nz + 1, dtype=np.int64)
        np.cumsum(
            np.bincount(self.keys[pos] >> _SHIFT, minlength=self.nx * self.nz), out=starts[1:]
        )
        return BandView(
            n_band=self.band_count(y_lo, y_hi), data=data, starts=array("q", starts.tobytes())
        )

    def _ranks(self, y_lo: float, y_hi: float) -> tuple[int, int]:
        """Rank bounds of a band (rows with ee_y in [y_lo, y_hi) have rank in [lo, hi))."""
        cache = self.__dict__.setdefault("_rank_cache", {})
        r = cache.get((y_lo, y_hi))
        if r is None:
            r = (
                int(np.searchsorted(self.ys, y_lo, "left")),
                int(np.searchsorted(self.ys, y_hi, "left")),
            )
            if len(cache) > 256:
                cache.clear()
            cache[(y_lo, y_hi)] = r
        return r

    def _template(self, nix: int, niz: int) -> NDArray[np.int64]:
        """Key offsets (cell << 32) of an nix x niz block of cells, relative to its first cell."""
        cache = self.__dict__.setdefault("_templates", {})
        t = cache.get((nix, niz))
        if t is None:
            t = (
                np.arange(nix, dtype=np.int64)[:, None] * self.nz
                + np.arange(niz, dtype=np.int64)[None, :]
            ).ravel() << 32
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
        return int(
            np.searchsorted(self.y_sorted, y_hi, "left")
            - np.searchsorted(self.y_sorted, y_lo, "left")
        )

    def window_rows(
        self, tx: float, tz: float, half: float, y_lo: float, y_hi: float
    ) -> NDArray[np.int64]:
        """Rows in the band whose cell meets the square |x-tx| <= half, |z-tz| <= half.

        Every row of the band outside the result has |dx| > half - 1e-12 or
        |dz| > half - 1e-12 (the slack covers rounding in the cell arithmetic).
        """
        r_lo, r_hi = self._ranks(y_lo, y_hi)
        cells = self.cell_range(tx, tz, half)
        if r_lo >= r_hi or cells is None:
            return np.empty(0, dtype=np.int64)
        ix_lo, ix_hi, iz_lo, iz_hi = cells
        tmpl = self._template(ix_hi - ix_lo + 1, iz_hi - iz_lo + 1)
        lo_keys = tmpl + (((ix_lo * self.nz + iz_lo) << 32) | r_lo)
        bounds = np.searchsorted(
            self.keys, np.concatenate((lo_keys, lo_keys + (r_hi - r_lo))), "left"
        )
        k = lo_keys.size
        lo = bounds[:k]
        n = bounds[k:] - lo
        total = int(n.sum())
        if total == 0:
            return np.empty(0, dtype=np.int64)
        pos = np.arange(total, dtype=np.int64) + np.repeat(lo - (np.cumsum(n) - n), n)
        return self.order[pos]
