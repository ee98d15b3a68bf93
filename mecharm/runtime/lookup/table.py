"""The FK table: one CSV under a fixed name, its checksum, a binary cache, archives.

Rows are ``ee_x, ee_y, ee_z, j0..j5`` (tool tip in the Unity frame in metres, then
six joint angles in degrees), docs/lookup.md. The CSV is the truth; parsing a million
rows is slow, so a binary copy (plus the spatial index of ``fk_lookup``) is kept
next to it (``FkTableFiles.cache``) and used only when its recorded checksum
equals the CSV's. The CSV's checksum is recorded beside it (``FkTableFiles.record``)
together with its size and mtime; when the CSV's size or mtime differ from that
record the file is hashed again (``verify=True`` always hashes), so a changed CSV
never meets a stale cache. A replaced table is archived under ``archive/``, never
overwritten, and never copied to a version-suffixed sibling. File names: docs/data-root.md.

Which rows are safe depends on the j1 limit the table was loaded with (the runtime's
``j1_max``, the guard's limit), so the lookup never chooses a pose the guard would
refuse; the limit is not part of the checksum, which is the CSV's alone.

One concern: the FK table's files: the CSV, its checksum record, the binary cache and the
archives, which must change together.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
from numpy.typing import NDArray

from mecharm.common.fsutil import atomic_write_json
from mecharm.common.kinematics import JOINT_MAX, JOINT_MIN, fk_tip
from mecharm.common.layout import FK_ARCHIVE, FK_TABLE, DataRoot, FkTableFiles
from mecharm.common.logging import get_logger

__all__ = [
    "ADOPT_MAX_FK_ERROR_MM",
    "ARCHIVE_DIR",
    "COLUMNS",
    "J1_SAFE_MAX",
    "TABLE_NAME",
    "AdoptReport",
    "ChecksumMismatch",
    "FkTable",
    "TableError",
    "adopt_table",
    "archive_table",
    "cache_path",
    "default_table_path",
    "file_checksum",
    "load_table",
    "read_csv_rows",
    "safety_mask",
    "save_cache",
    "write_table",
]

log = get_logger("mecharm.lookup.table")

COLUMNS: tuple[str, ...] = ("ee_x", "ee_y", "ee_z", "j0", "j1", "j2", "j3", "j4", "j5")
TABLE_NAME = FK_TABLE
ARCHIVE_DIR = FK_ARCHIVE
#: Default j1 limit: the firmware silently ignores send_angles above j1 ~ 90.7° (docs/lookup.md).
J1_SAFE_MAX = 88.0
_CACHE_VERSION = 1
#: Largest distance (mm) between a row's tip and the kinematic model's tip for its joints
#: that adopting accepts: the rig's own table is within ~3 mm of the model (docs/kinematics.md),
#: a hand-edited coordinate or a shifted column is not.
ADOPT_MAX_FK_ERROR_MM = 10.0


class TableError(ValueError):
    """An FK table file is missing, malformed or inconsistent with its checksum."""


class ChecksumMismatch(TableError):
    """The CSV is not the table its checksum record describes (changed after build/import)."""

    def __init__(self, path: Path, recorded: str, actual: str) -> None:
        self.path, self.recorded, self.actual = path, recorded, actual
        super().__init__(
            f"FK table {path}: checksum {actual} does not match the recorded {recorded} "
            f"({_record_path(path)}): the CSV was changed after it was built or imported, "
            "so its lookups are not the ones tested. If the change is intended, check and adopt "
            f"it: `mecharm fk adopt --table {path}`; otherwise restore it (`mecharm fk build` "
            f"rebuilds the default, earlier tables are in {FkTableFiles(path).archive_dir})"
        )


def default_table_path(data_dir: Path) -> Path:
    """The one fixed name of the table in a data directory (docs/data-root.md)."""
    return DataRoot(data_dir).fk_table


def file_checksum(path: Path) -> str:
    """sha256 of a file's bytes, hex."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def safety_mask(joints: NDArray[np.float64], j1_max: float = J1_SAFE_MAX) -> NDArray[np.bool_]:
    """Rows inside the SDK joint limits and with j1 <= ``j1_max``."""
    lo = np.asarray(JOINT_MIN)
    hi = np.asarray(JOINT_MAX)
    ok = np.all((joints >= lo) & (joints <= hi), axis=1)
    ok &= joints[:, 1] <= j1_max
    return ok


def _j1_limit(j1_max: float) -> float:
    j1 = float(j1_max)
    if not np.isfinite(j1):
        raise TableError(f"j1_max must be a finite number of degrees, got {j1_max!r}")
    return j1


@dataclass(eq=False)
class FkTable:
    """A loaded table: columns as contiguous float64 arrays, plus its checksum.

    ``xyz[i]`` and ``joints[i]`` are row ``i`` of the CSV (0-based, header excluded).
    ``j1_max`` is fixed for the table's life: the safety mask and everything built on it
    (index band views, ee_y-ordered columns) are cached per table.
    """

    xyz: NDArray[np.float64]  # (n, 3)
    joints: NDArray[np.float64]  # (n, 6)
    checksum: str
    path: Path | None = None
    j1_max: float = J1_SAFE_MAX
    _index: Any = field(default=None, repr=False)
    _cols: dict[str, NDArray[Any]] = field(default_factory=dict, repr=False)

    @property
    def n_rows(self) -> int:
        return int(self.xyz.shape[0])

    def col(self, name: str) -> NDArray[Any]:
        """A contiguous copy of one column (cached): ee_x, ee_y, ee_z, j0..j5, safe, xz (n, 2)."""
        arr = self._cols.get(name)
        if arr is None:
            if name == "safe":
                arr = safety_mask(self.joints, self.j1_max)
            elif name == "xz":
                arr = np.ascontiguousarray(self.xyz[:, [0, 2]])
            elif name in COLUMNS[:3]:
                arr = np.ascontiguousarray(self.xyz[:, COLUMNS.index(name)])
            elif name in COLUMNS[3:]:
                arr = np.ascontiguousarray(self.joints[:, COLUMNS.index(name) - 3])
            else:
                raise KeyError(name)
            self._cols[name] = arr
        return arr

    @property
    def index(self) -> Any:
        """The spatial index used by ``fk_lookup(method="indexed")`` (built on first use)."""
        if self._index is None:
            from mecharm.runtime.lookup.index import FkIndex

            self._index = FkIndex.build(self)
        return self._index

    def warm(self, bands: Iterable[tuple[float, float]] = ()) -> FkTable:
        """Build now what the first lookups would build (columns, safety mask, index,
        ee_y-ordered columns, and the band views of ``bands`` — the (ee_y_min, ee_y_max)
        pairs the caller will use, ~15-50 ms each on the default table): call it in a
        worker thread after loading to keep the first lookups of a trial fast. Returns self."""
        for name in (*COLUMNS, "safe", "xz"):
            self.col(name)
        idx = self.index
        for name in ("safe", *COLUMNS[3:]):
            idx.ycol(self, name)
        for lo, hi in bands:
            view = idx.band_view(self, float(lo), float(hi), build=True)
            assert view is not None
            view.by_j0()
        return self

    def with_j1_max(self, j1_max: float) -> FkTable:
        """This table under another j1 limit: the same rows, checksum and spatial index
        arrays, with its own safety mask and band views. ``self`` when the limit is equal."""
        j1 = _j1_limit(j1_max)
        if j1 == self.j1_max:
            return self
        other = FkTable(
            xyz=self.xyz, joints=self.joints, checksum=self.checksum, path=self.path, j1_max=j1
        )
        other._cols.update((k, v) for k, v in self._cols.items() if k != "safe")
        if self._index is not None:
            from mecharm.runtime.lookup.index import FkIndex

            other._index = FkIndex.from_arrays(other, self._index.arrays())
        return other

    def row(self, i: int) -> tuple[float, ...]:
        return tuple(float(v) for v in (*self.xyz[i], *self.joints[i]))

    @classmethod
    def from_rows(
        cls,
        rows: NDArray[np.float64],
        checksum: str = "",
        path: Path | None = None,
        j1_max: float = J1_SAFE_MAX,
    ) -> FkTable:
        """Wrap an (n, 9) array (in memory, e.g. tests); ``checksum`` defaults to a hash of the data."""
        rows = np.asarray(rows, dtype=np.float64)
        if rows.ndim != 2 or rows.shape[1] != 9:
            raise TableError(f"table rows must have shape (n, 9), got {rows.shape}")
        if not np.all(np.isfinite(rows)):
            bad = int(np.argwhere(~np.isfinite(rows))[0][0])
            raise TableError(f"table row {bad} holds a non-finite value")
        if not checksum:
            checksum = hashlib.sha256(np.ascontiguousarray(rows).tobytes()).hexdigest()
        return cls(
            xyz=np.ascontiguousarray(rows[:, :3]),
            joints=np.ascontiguousarray(rows[:, 3:]),
            checksum=checksum,
            path=path,
            j1_max=_j1_limit(j1_max),
        )


def read_csv_rows(path: Path) -> NDArray[np.float64]:
    """Parse an FK table CSV (header ``ee_x,ee_y,ee_z,j0..j5``) into an (n, 9) array.

    Raises TableError naming the file and what is wrong (missing/extra columns,
    non-numeric or non-finite values, no rows).
    """
    path = Path(path)
    try:
        tbl = pacsv.read_csv(
            path,
            convert_options=pacsv.ConvertOptions(column_types={c: pa.float64() for c in COLUMNS}),
        )
    except FileNotFoundError:
        raise TableError(f"FK table {path}: no such file") from None
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise TableError(f"FK table {path}: not a valid table CSV: {exc}") from None
    names = [n.strip() for n in tbl.column_names]
    if names != list(COLUMNS):
        raise TableError(
            f"FK table {path}: columns must be {','.join(COLUMNS)}, got {','.join(names)}"
        )
    if tbl.num_rows == 0:
        raise TableError(f"FK table {path}: no rows")
    rows = np.empty((tbl.num_rows, 9))
    for i, col in enumerate(tbl.columns):
        if col.null_count:
            raise TableError(
                f"FK table {path}: column {COLUMNS[i]} has {col.null_count} empty cells"
            )
        rows[:, i] = col.to_numpy()
    if not np.all(np.isfinite(rows)):
        r, c = np.argwhere(~np.isfinite(rows))[0]
        raise TableError(f"FK table {path}: row {int(r)} column {COLUMNS[c]} is not finite")
    return rows


def write_table(path: Path, rows: NDArray[np.float64]) -> str:
    """Write ``rows`` as the table CSV at ``path`` (atomically) and record its checksum.

    Returns the sha256. Values are written in their shortest round-trip form, so
    parsing the CSV gives back exactly ``rows``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tbl = pa.table({c: np.ascontiguousarray(rows[:, i]) for i, c in enumerate(COLUMNS)})
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write((",".join(COLUMNS) + "\n").encode("ascii"))
            pacsv.write_csv(
                tbl,
                fh,
                write_options=pacsv.WriteOptions(include_header=False, quoting_style="none"),
            )
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    checksum = file_checksum(path)
    _write_record(path, checksum, n_rows=int(rows.shape[0]))
    return checksum


def _record_path(path: Path) -> Path:
    return FkTableFiles(path).record


def _write_record(path: Path, checksum: str, n_rows: int | None) -> None:
    st = path.stat()
    rec = {
        "file": path.name,
        "sha256": checksum,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "n_rows": n_rows,
    }
    try:
        atomic_write_json(_record_path(path), rec)
    except OSError as exc:  # read-only location: still usable, only slower next time
        log.warning("fk_table_record_not_written", path=str(path), error=str(exc))


def _read_record(path: Path) -> dict[str, Any] | None:
    try:
        rec = json.loads(_record_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def cache_path(path: Path, checksum: str) -> Path:
    return FkTableFiles(Path(path)).cache(checksum)


def _checksum_of(path: Path, verify: bool, *, strict: bool = True) -> str:
    """The CSV's sha256: the record's when size and mtime match it (unless ``verify``),
    else hashed. A hash that differs from the recorded one raises ChecksumMismatch
    (``strict``) and leaves the record as it is; ``strict=False`` (archiving) returns it.
    A table without a record (copied in by hand) is recorded as it is."""
    st = path.stat()
    rec = _read_record(path)
    recorded = rec.get("sha256") if rec is not None else None
    if (
        not verify
        and rec is not None
        and rec.get("size") == st.st_size
        and rec.get("mtime_ns") == st.st_mtime_ns
        and isinstance(recorded, str)
    ):
        return str(recorded)
    checksum = file_checksum(path)
    if isinstance(recorded, str) and recorded != checksum:
        if not strict:
            return checksum
        log.error("fk_table_checksum_mismatch", path=str(path), recorded=recorded, actual=checksum)
        raise ChecksumMismatch(path, recorded, checksum)
    if rec is None:
        log.warning("fk_table_record_missing", path=str(path), recorded_now=checksum)
    _write_record(path, checksum, n_rows=None if rec is None else rec.get("n_rows"))
    return checksum


def load_table(
    path: Path | str, *, verify: bool = False, use_cache: bool = True, j1_max: float = J1_SAFE_MAX
) -> FkTable:
    """Load the table at ``path`` through its checksum-keyed binary cache.

    The cache is rebuilt (from the CSV) when missing, unreadable or recorded for
    another checksum; ``verify`` re-hashes the CSV even if its size and mtime match
    the checksum record. ``j1_max`` is the limit the lookups keep to (pass the
    runtime's configured one); it changes neither the checksum nor the cache.
    Raises TableError for a missing or malformed CSV or a non-finite ``j1_max``, and
    ChecksumMismatch for a CSV that differs from its checksum record (``adopt_table``).
    """
    path = Path(path)
    j1_max = _j1_limit(j1_max)
    if not path.is_file():
        raise TableError(f"FK table {path}: no such file")
    t0 = time.perf_counter()
    checksum = _checksum_of(path, verify)
    cpath = cache_path(path, checksum)
    if use_cache and cpath.is_file():
        table = _load_cache(cpath, checksum, path, j1_max)
        if table is not None:
            log.debug(
                "fk_table_loaded",
                path=str(path),
                source="cache",
                n_rows=table.n_rows,
                ms=round((time.perf_counter() - t0) * 1000, 1),
            )
            return table
    rows = read_csv_rows(path)
    table = FkTable.from_rows(rows, checksum=checksum, path=path, j1_max=j1_max)
    if use_cache:
        _save_cache(path, table)
    log.info(
        "fk_table_loaded",
        path=str(path),
        source="csv",
        n_rows=table.n_rows,
        checksum=checksum,
        ms=round((time.perf_counter() - t0) * 1000, 1),
    )
    return table


def _load_cache(cpath: Path, checksum: str, path: Path, j1_max: float) -> FkTable | None:
    from mecharm.runtime.lookup.index import CELL_M, FkIndex

    try:
        with np.load(cpath, allow_pickle=False) as z:
            meta = json.loads(bytes(z["meta"]).decode("utf-8"))
            if (
                meta.get("sha256") != checksum
                or meta.get("version") != _CACHE_VERSION
                or meta.get("cell") != CELL_M
            ):
                log.warning(
                    "fk_table_cache_mismatch", cache=str(cpath), recorded=meta.get("sha256")
                )
                return None
            table = FkTable(
                xyz=z["xyz"], joints=z["joints"], checksum=checksum, path=path, j1_max=j1_max
            )
            table._index = FkIndex.from_arrays(
                table, {k[4:]: z[k] for k in z.files if k.startswith("idx_")}
            )
    except (OSError, ValueError, KeyError) as exc:
        log.warning("fk_table_cache_unreadable", cache=str(cpath), error=str(exc))
        return None
    return table


def save_cache(path: Path, table: FkTable) -> None:
    """Write the binary cache of ``table`` (whose rows are exactly the CSV at ``path``)."""
    _save_cache(Path(path), table)


def _save_cache(path: Path, table: FkTable) -> None:
    files = FkTableFiles(path)
    cpath = files.cache(table.checksum)
    from mecharm.runtime.lookup.index import CELL_M

    meta = json.dumps(
        {
            "sha256": table.checksum,
            "version": _CACHE_VERSION,
            "n_rows": table.n_rows,
            "cell": CELL_M,
        }
    )
    arrays: dict[str, Any] = {
        "meta": np.frombuffer(meta.encode("utf-8"), dtype=np.uint8),
        "xyz": table.xyz,
        "joints": table.joints,
    }
    arrays.update({f"idx_{k}": v for k, v in table.index.arrays().items()})
    tmp = cpath.with_name(cpath.name + f".{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)
        os.replace(tmp, cpath)
    except OSError as exc:
        log.warning("fk_table_cache_not_written", cache=str(cpath), error=str(exc))
    finally:
        tmp.unlink(missing_ok=True)
    for old in cpath.parent.glob(files.cache_glob):
        if old != cpath:
            old.unlink(missing_ok=True)


def archive_table(path: Path) -> Path | None:
    """Move the table at ``path`` (and its checksum record) into ``archive/``.

    The archived copy is named ``{stem}.{mtime}.{sha256[:12]}.csv`` and verified by
    checksum after the move. Returns the archive path, or None if there was no table.
    """
    path = Path(path)
    if not path.is_file():
        return None
    checksum = _checksum_of(path, verify=True, strict=False)  # an edited table is archived too
    stamp = time.strftime("%Y%m%d_%H%M%S", time.gmtime(path.stat().st_mtime))
    dest_dir = FkTableFiles(path).archive_dir
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / f"{path.stem}.{stamp}.{checksum[:12]}{path.suffix}"
    if dest.exists():
        if file_checksum(dest) != checksum:
            raise TableError(f"archive {dest} exists with a different checksum")
        path.unlink()
    else:
        shutil.move(str(path), dest)
        if file_checksum(dest) != checksum:
            raise TableError(f"archived copy {dest} does not match checksum {checksum}")
    rec = _record_path(path)
    if rec.is_file():
        rec.replace(FkTableFiles(dest).record)
    for old in path.parent.glob(FkTableFiles(path).cache_glob):
        old.unlink(missing_ok=True)
    log.info("fk_table_archived", path=str(path), archive=str(dest), checksum=checksum)
    return dest


@dataclass(frozen=True)
class AdoptReport:
    path: Path
    previous: str | None  # the checksum recorded before, None without a record
    checksum: str
    n_rows: int
    max_fk_error_mm: float  # largest row tip vs model tip distance

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": str(self.path),
            "previous_sha256": self.previous,
            "sha256": self.checksum,
            "n_rows": self.n_rows,
            "max_fk_error_mm": round(self.max_fk_error_mm, 3),
            "adopted": self.previous != self.checksum,
        }


def adopt_table(path: Path | str, *, max_fk_error_mm: float = ADOPT_MAX_FK_ERROR_MM) -> AdoptReport:
    """Record the CSV at ``path`` as the table after a validation pass (docs/lookup.md,
    "Adopting a changed table"): the format check of ``read_csv_rows`` (columns, numbers,
    finite, at least one row) and every row's tip within ``max_fk_error_mm`` of the
    kinematic model's tip for its joints. Then the new checksum is recorded and caches of
    other checksums are removed. Raises TableError naming what failed; the record is
    then left as it was (the table stays refused)."""
    path = Path(path)
    if not path.is_file():
        raise TableError(f"FK table {path}: no such file")
    if not (np.isfinite(max_fk_error_mm) and max_fk_error_mm > 0):
        raise TableError(f"max_fk_error_mm must be a positive number, got {max_fk_error_mm!r}")
    rec = _read_record(path)
    previous = rec.get("sha256") if rec is not None else None
    checksum = file_checksum(path)
    rows = read_csv_rows(path)
    err_mm = np.linalg.norm(fk_tip(rows[:, 3:]) - rows[:, :3], axis=1) * 1000.0
    bad = np.flatnonzero(~(err_mm <= max_fk_error_mm))
    if bad.size:
        shown = ", ".join(f"row {int(i)} ({err_mm[i]:.1f} mm)" for i in bad[:5])
        raise TableError(
            f"FK table {path}: {bad.size} row(s) put the tip farther than {max_fk_error_mm:g} mm "
            f"from where the kinematic model puts it for their joints: {shown}"
            f"{' ...' if bad.size > 5 else ''}. Not adopted: a row's position and joints "
            "disagree (an edited value or a shifted column); fix or restore the table"
        )
    if file_checksum(path) != checksum:
        raise TableError(f"FK table {path}: changed while it was being checked; run adopt again")
    st = path.stat()
    try:
        atomic_write_json(_record_path(path), {"file": path.name, "sha256": checksum,
                          "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                          "n_rows": int(rows.shape[0])})  # fmt: skip
    except OSError as exc:
        raise TableError(
            f"FK table {path}: cannot write its checksum record {_record_path(path)}: "
            f"{exc.strerror or exc}; make the directory writable and adopt again"
        ) from None
    files = FkTableFiles(path)
    keep = files.cache(checksum)
    for old in path.parent.glob(files.cache_glob):
        if old != keep:
            old.unlink(missing_ok=True)
    report = AdoptReport(path, previous if isinstance(previous, str) else None, checksum,
                         int(rows.shape[0]), float(err_mm.max()))  # fmt: skip
    log.warning("fk_table_adopted", **report.to_dict())
    return report
