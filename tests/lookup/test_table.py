"""Table files: exact CSV round trip, checksum record, binary cache and its invalidation,
archive instead of overwrite, builder determinism, rig CSV import, clear errors."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from mecharm.common.layout import FK_TABLE, FkTableFiles
from mecharm.runtime.lookup import (
    FkTable,
    TableError,
    build_table,
    ensure_table,
    fk_lookup,
    load_table,
)
from mecharm.runtime.lookup import table as table_mod
from mecharm.runtime.lookup.build import (
    DEFAULT_BASES,
    default_rows,
    lattice,
    rows_from_angles,
    warmed,
)
from mecharm.runtime.lookup.table import (
    ChecksumMismatch,
    adopt_table,
    cache_path,
    file_checksum,
    read_csv_rows,
)

from .conftest import place_rows


def small_rows() -> np.ndarray:
    return place_rows(j0s=(30.0,), steps=3)


def test_csv_round_trip_is_exact(tmp_path: Path) -> None:
    rows = small_rows()
    path = tmp_path / "fk" / FK_TABLE
    checksum = build_table(path, rows)
    assert checksum == file_checksum(path)
    assert path.read_text().splitlines()[0] == "ee_x,ee_y,ee_z,j0,j1,j2,j3,j4,j5"
    assert np.array_equal(read_csv_rows(path), rows)
    table = load_table(path)
    assert table.checksum == checksum and table.n_rows == len(rows)
    assert np.array_equal(table.xyz, rows[:, :3]) and np.array_equal(table.joints, rows[:, 3:])


def test_cache_is_used_and_keyed_by_checksum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / FK_TABLE
    build_table(path, small_rows())
    first = load_table(path)
    assert cache_path(path, first.checksum).is_file()

    def no_parse(p: Path) -> np.ndarray:
        raise AssertionError("CSV parsed although the cache is valid")

    monkeypatch.setattr(table_mod, "read_csv_rows", no_parse)
    second = load_table(path)
    assert second.checksum == first.checksum and np.array_equal(second.xyz, first.xyz)
    # the cached index answers like a fresh one
    assert np.array_equal(
        second.index.order, FkTable.from_rows(np.c_[first.xyz, first.joints]).index.order
    )


def _edit_j5(path: Path, value: str = "-31.25") -> None:
    """Edit row 0's j5 by hand (j5 does not move the tip, so the row stays consistent)."""
    lines = path.read_text().splitlines()
    fields = lines[1].split(",")
    fields[8] = value if fields[8] != value else "-32.5"
    lines[1] = ",".join(fields)
    path.write_text("\n".join(lines) + "\n")


def test_changed_csv_is_refused_until_adopted_and_never_served_from_a_stale_cache(
    tmp_path: Path,
) -> None:
    path = tmp_path / FK_TABLE
    rows = small_rows()
    build_table(path, rows)
    old = load_table(path)
    _edit_j5(path)  # like someone fixing a row in an editor
    actual = file_checksum(path)
    with pytest.raises(ChecksumMismatch) as err:
        load_table(path)
    msg = str(err.value)
    assert old.checksum in msg and actual in msg  # both checksums, in full
    assert f"mecharm fk adopt --table {path}" in msg
    assert table_mod._read_record(path)["sha256"] == old.checksum  # the record is kept
    with pytest.raises(ChecksumMismatch):  # still refused: nothing adopted it silently
        load_table(path)
    report = adopt_table(path)
    assert (report.previous, report.checksum, report.n_rows) == (old.checksum, actual, len(rows))
    assert not cache_path(path, old.checksum).exists()  # the stale cache is removed
    new = load_table(path)
    assert new.checksum == actual and new.joints[0, 5] == -31.25
    assert cache_path(path, new.checksum).is_file()


def test_verify_catches_an_edit_that_kept_size_and_mtime(tmp_path: Path) -> None:
    path = tmp_path / FK_TABLE
    build_table(path, small_rows())
    old = load_table(path)
    st = path.stat()
    data = bytearray(path.read_bytes())
    i = data.index(b"\n") + 1  # first digit-ish char of row 0
    while not chr(data[i]).isdigit():
        i += 1
    data[i] = ord("7") if data[i] != ord("7") else ord("8")
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert load_table(path).checksum == old.checksum  # size+mtime unchanged: trusted record
    with pytest.raises(ChecksumMismatch, match=file_checksum(path)):
        load_table(path, verify=True)


def test_adopt_refuses_rows_whose_position_and_joints_disagree(tmp_path: Path) -> None:
    path = tmp_path / FK_TABLE
    recorded = build_table(path, small_rows())
    lines = path.read_text().splitlines()
    fields = lines[3].split(",")
    fields[3] = str(float(fields[3]) + 20.0)  # j0 of row 2 turned by 20°, its tip left as it was
    lines[3] = ",".join(fields)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TableError, match=r"1 row\(s\) put the tip farther than 10 mm.*row 2 \("):
        adopt_table(path)
    assert table_mod._read_record(path)["sha256"] == recorded  # not adopted
    with pytest.raises(ChecksumMismatch):
        load_table(path)
    path.write_text("ee_x,ee_y\n1,2\n")  # not a table at all: the format check names it
    with pytest.raises(TableError, match="columns must be"):
        adopt_table(path)


def test_a_table_without_a_record_is_recorded_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / FK_TABLE
    checksum = build_table(path, small_rows())
    FkTableFiles(path).record.unlink()
    assert load_table(path).checksum == checksum
    assert table_mod._read_record(path)["sha256"] == checksum


def test_building_over_an_edited_table_archives_it(tmp_path: Path) -> None:
    path = tmp_path / FK_TABLE
    build_table(path, small_rows())
    _edit_j5(path)
    edited = file_checksum(path)
    build_table(path, small_rows())
    archived = list((tmp_path / "archive").glob("fk_table.*.csv"))
    assert [file_checksum(a) for a in archived] == [edited]
    load_table(path)


def test_corrupt_cache_falls_back_to_the_csv(tmp_path: Path) -> None:
    path = tmp_path / FK_TABLE
    build_table(path, small_rows())
    t = load_table(path)
    cache_path(path, t.checksum).write_bytes(b"not a zip file")
    again = load_table(path)
    assert np.array_equal(again.xyz, t.xyz)


def test_existing_table_is_archived_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / FK_TABLE
    c1 = build_table(path, small_rows())
    c2 = build_table(path, place_rows(j0s=(40.0,), steps=3))
    assert c1 != c2
    archived = list((tmp_path / "archive").glob("fk_table.*.csv"))
    assert len(archived) == 1 and file_checksum(archived[0]) == c1 and c1[:12] in archived[0].name
    assert sorted(p.name for p in tmp_path.glob("fk_table*")) == [
        FK_TABLE,
        FkTableFiles(path).record.name,
    ]
    assert file_checksum(path) == c2


def test_builder_is_deterministic(tmp_path: Path) -> None:
    bases = DEFAULT_BASES[:2]
    a = build_table(tmp_path / "a" / FK_TABLE, default_rows(bases, with_global=False))
    b = build_table(tmp_path / "b" / FK_TABLE, default_rows(bases, with_global=False))
    assert a == b
    assert len(lattice(bases[0])) == 16_807


def test_lattice_keeps_j5_and_spans_15_degrees() -> None:
    q = lattice((10, 20, 30, 40, 50, -30))
    assert np.all(q[:, 5] == -30)
    for j, b in enumerate((10, 20, 30, 40, 50)):
        assert sorted(set(q[:, j])) == [b - 15, b - 10, b - 5, b, b + 5, b + 10, b + 15]


def test_rows_match_the_kinematic_model() -> None:
    from mecharm.common.kinematics import fk_tip

    rows = rows_from_angles(np.array([[-31.93, 87.74, -38.33, 18.6, -45.11, -30.0]]))
    assert np.allclose(rows[0, :3], fk_tip(rows[0, 3:]), atol=1e-6)
    # the rig's calibration row (docs/kinematics.md) within 5 mm
    assert np.linalg.norm(rows[0, :3] - [0.203019, 0.038917, 0.259061]) < 0.005


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("ee_x,ee_y,ee_z,j0,j1,j2,j3,j4\n0,0,0,0,0,0,0,0\n", "columns"),
        ("ee_x,ee_y,ee_z,j0,j1,j2,j3,j4,j5\n0,0,0,0,0,0,0,0,abc\n", "not a valid table CSV"),
        ("ee_x,ee_y,ee_z,j0,j1,j2,j3,j4,j5\n", "no rows"),
        ("ee_x,ee_y,ee_z,j0,j1,j2,j3,j4,j5\n0,0,0,0,0,0,0,0,\n", "empty cells"),
        ("ee_x,ee_y,ee_z,j0,j1,j2,j3,j4,j5\n0,0,0,0,0,0,0,0,inf\n", "not finite"),
    ],
)
def test_malformed_csv_is_rejected_with_a_clear_error(
    tmp_path: Path, text: str, match: str
) -> None:
    path = tmp_path / "rig.csv"
    path.write_text(text)
    with pytest.raises(TableError, match=match):
        load_table(path)


def test_missing_table(tmp_path: Path) -> None:
    with pytest.raises(TableError, match="no such file"):
        load_table(tmp_path / "nope.csv")


def test_concurrent_ensure_builds_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two starts racing on one data root: one builds, the other waits and finds the table.

    Threads, each with its own open file description, contend for the flock like processes do.
    """
    import threading

    from mecharm.runtime.lookup import build as build_mod

    small = default_rows(DEFAULT_BASES[:1], with_global=False)
    calls: list[int] = []

    def rows() -> np.ndarray:
        calls.append(1)
        return small

    monkeypatch.setattr(build_mod, "default_rows", rows)
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(ensure_table(tmp_path))) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 3 and len(set(results)) == 1
    assert len(calls) == 1 and not (tmp_path / "fk" / "archive").exists()
    assert load_table(results[0]).n_rows == len(small)


def test_warm_builds_the_lazy_parts() -> None:
    table = FkTable.from_rows(small_rows())
    assert table.warm() is table
    assert table._index is not None and set(table._cols) >= {"ee_x", "ee_y", "ee_z", "safe", "j3"}
    assert np.array_equal(table.index.ycol(table, "j0"), table.joints[table.index.by_y, 0])


def test_a_table_loaded_again_is_warmed_once_per_process(tmp_path: Path) -> None:
    """Each rig loads the table: the second load of the same file and rows gets the table
    the first warmed; other rows, another j1 limit or other bands are warmed apart."""
    path = tmp_path / FK_TABLE
    build_table(path, small_rows())
    first = load_table(path)
    lo, hi = float(first.col("ee_y").min()), float(first.col("ee_y").max())
    assert warmed(first, [(lo, hi)]) is first and first._index is not None
    again = load_table(path)
    assert again is not first and warmed(again, [(lo, hi)]) is first
    assert warmed(again, [(lo, hi + 0.01)]) is again  # other bands: warmed apart
    lower = load_table(path, j1_max=60.0)
    assert warmed(lower, [(lo, hi)]) is lower
    other = tmp_path / "other" / FK_TABLE
    build_table(other, small_rows()[:-1])
    assert warmed(load_table(other), [(lo, hi)]) is not first


def test_warm_builds_the_band_views_asked_for() -> None:
    table = FkTable.from_rows(small_rows())
    lo, hi = float(table.col("ee_y").min()), float(table.col("ee_y").max()) + 0.01
    table.warm(bands=[(lo, hi)])
    views = table.index.__dict__["_views"]
    assert list(views) == [(lo, hi)] and "_by_j0" in views[(lo, hi)].__dict__
    # the first lookup of that band already goes through the view (and gives the brute answer)
    tx, tz = float(table.col("ee_x")[0]), float(table.col("ee_z")[0])
    got = fk_lookup(table, "pick", (tx, tz), lo, hi)
    assert (
        got.ok
        and got.selected_index
        == fk_lookup(table, "pick", (tx, tz), lo, hi, method="brute").selected_index
    )
    assert table.index.__dict__.get("_band_uses", {}).get((lo, hi)) is None
