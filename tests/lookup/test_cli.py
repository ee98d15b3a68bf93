"""`mecharm fk ...` end to end through the real dispatcher, on small tables."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mecharm.common.layout import FK_TABLE
from mecharm.runtime.lookup import build_table, load_arc, load_table
from mecharm.runtime.lookup.j0 import DEFAULT_PLACE_ARC
from mecharm.runtime.lookup.table import COLUMNS
from mecharm.tools.cli import main

from .conftest import place_rows


@pytest.fixture
def table_path(tmp_path: Path) -> Path:
    path = tmp_path / "fk" / FK_TABLE
    build_table(path, place_rows(j0s=(40.0,), steps=7))
    return path


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(["fk", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_lookup_prints_the_result_as_json(
    table_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, _ = run(
        [
            "lookup",
            "--table",
            str(table_path),
            "--phase",
            "place_withblock",
            "--x",
            "-0.17",
            "--z",
            "0.18",
            "--ref-arc",
            str(DEFAULT_PLACE_ARC),
            "--joint-tol",
            "15",
            "--ee-y-floor",
            "0.07",
        ],
        capsys,
    )
    doc = json.loads(out)
    assert rc == 0 and doc["ok"] and doc["band"] == [0.07, 0.1] and doc["joint_tol"] == 15.0
    assert doc["approach"]["ok"] and doc["ref_joints"] == doc["approach"]["angles"]


def test_lookup_out_of_range_exit_code(
    table_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, _ = run(
        [
            "lookup",
            "--table",
            str(table_path),
            "--phase",
            "pick",
            "--x",
            "0.2",
            "--z",
            "0.25",
            "--j3-ref",
            "0",
            "--j5-ref",
            "-30",
            "--band-deg",
            "2",
        ],
        capsys,
    )
    doc = json.loads(out)
    assert rc == 1 and not doc["ok"] and doc["reason_code"] in ("no_candidates", "too_far")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--ref-joints", "1", "2", "3", "4", "5", "6"], "joint_tol"),
        (["--ee-y-min", "0.05", "--ee-y-max", "0.01"], "ee_y_min"),
        (["--joint-tol", "-1", "--ref-joints", "1", "2", "3", "4", "5", "6"], "joint_tol"),
    ],
)
def test_lookup_bad_input_exit_2(
    table_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    rc, _, err = run(
        [
            "lookup",
            "--table",
            str(table_path),
            "--phase",
            "pick",
            "--x",
            "0.2",
            "--z",
            "0.25",
            *extra,
        ],
        capsys,
    )
    assert rc == 2 and message in err


def test_lookup_missing_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(
        ["lookup", "--data-dir", str(tmp_path), "--phase", "pick", "--x", "0.2", "--z", "0.25"],
        capsys,
    )
    assert rc == 2 and "no such file" in err


def test_build_from_csv_imports_under_the_fixed_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rig = tmp_path / "rig_table_v3.csv"
    rows = place_rows(j0s=(30.0,), steps=3)
    rig.write_text(
        ",".join(COLUMNS)
        + "\n"
        + "\n".join(",".join(repr(float(v)) for v in r) for r in rows)
        + "\n"
    )
    rc, out, _ = run(
        ["build", "--data-dir", str(tmp_path / "data"), "--from-csv", str(rig)], capsys
    )
    doc = json.loads(out)
    assert rc == 0 and doc["n_rows"] == len(rows)
    table = load_table(tmp_path / "data" / "fk" / FK_TABLE)
    assert np.array_equal(table.joints, rows[:, 3:]) and table.checksum == doc["sha256"]
    # a second import archives the first generation
    rc, _, _ = run(["build", "--data-dir", str(tmp_path / "data"), "--from-csv", str(rig)], capsys)
    assert rc == 0 and len(list((tmp_path / "data" / "fk" / "archive").glob("*.csv"))) == 1


def test_build_rejects_a_bad_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    rc, _, err = run(["build", "--data-dir", str(tmp_path), "--from-csv", str(bad)], capsys)
    assert rc == 2 and "columns must be" in err
    assert not (tmp_path / "fk" / FK_TABLE).exists()


def test_adopt_arc_writes_the_pose_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "approach_place.json"
    rc, _, _ = run(
        [
            "adopt-arc",
            "--name",
            "approach_place",
            "--phase",
            "approach_place",
            "--base",
            "57.39",
            "17.49",
            "0.08",
            "-89.2",
            "-29.44",
            "--x-range",
            "-0.35",
            "-0.03",
            "--z",
            "0.19",
            "--out",
            str(out_file),
        ],
        capsys,
    )
    assert rc == 0
    assert load_arc(out_file) == load_arc(DEFAULT_PLACE_ARC)
    assert out_file.read_text() == Path(DEFAULT_PLACE_ARC).read_text()


def test_holes_clusters_fill(
    table_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, _ = run(
        ["holes", "--table", str(table_path), "--out-dir", str(tmp_path / "map")], capsys
    )
    assert rc == 0 and "# dense" in out
    assert (tmp_path / "map" / "hole_map.csv").read_text().count("\n") == 196
    before_sum = json.loads(out[out.index("{") :])
    clusters_file = tmp_path / "clusters.json"
    rc, out, _ = run(["clusters", "--table", str(table_path), "--out", str(clusters_file)], capsys)
    doc = json.loads(out)
    assert (
        rc == 0
        and doc["holes"] == before_sum["holes"]
        and doc["clusters"] == len(doc["clusters_detail"])
    )
    rc, out, _ = run(["fill", "--table", str(table_path), "--clusters", str(clusters_file)], capsys)
    res = json.loads(out[out.index("{") :])
    assert rc == 0 and res["rows_added"] > 0 and res["after"]["holes"] <= res["before"]["holes"]
    # the clusters file belongs to the previous generation now: refused
    rc, _, err = run(["fill", "--table", str(table_path), "--clusters", str(clusters_file)], capsys)
    assert rc == 2 and "checksum" in err


def test_settings_from_environment_and_yaml(
    table_path: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    args = ["lookup", "--phase", "place_withblock", "--x", "-0.17", "--z", "0.18"]
    monkeypatch.setenv("MECHARM_FK_DATA_DIR", str(table_path.parent.parent))
    rc, out, _ = run(args, capsys)
    assert rc in (0, 1) and json.loads(out)["table_checksum"] == load_table(table_path).checksum
    monkeypatch.delenv("MECHARM_FK_DATA_DIR")
    cfg = tmp_path / "fk.yaml"
    cfg.write_text(f"table: {table_path}\n")
    rc, out, _ = run([*args, "--config", str(cfg)], capsys)
    assert rc in (0, 1) and json.loads(out)["table_checksum"] == load_table(table_path).checksum
    cfg.write_text("tabel: x\n")
    rc, _, err = run([*args, "--config", str(cfg)], capsys)
    assert rc == 2 and "tabel" in err and "unknown key" in err


def test_adopt_a_changed_table(
    table_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recorded = load_table(table_path).checksum
    lines = table_path.read_text().splitlines()
    fields = lines[1].split(",")
    fields[8] = "-31.25"  # j5: does not move the tip, so the edit passes the FK check
    lines[1] = ",".join(fields)
    table_path.write_text("\n".join(lines) + "\n")
    args = ["--table", str(table_path), "--phase", "pick", "--x", "0.2", "--z", "0.26"]
    rc, _, err = run(["lookup", *args], capsys)
    assert rc == 2 and recorded in err and f"mecharm fk adopt --table {table_path}" in err
    assert "Traceback" not in err
    rc, out, _ = run(["adopt", "--table", str(table_path)], capsys)
    doc = json.loads(out)
    assert rc == 0 and doc["adopted"] and doc["previous_sha256"] == recorded
    assert doc["sha256"] == load_table(table_path).checksum != recorded
    assert doc["max_fk_error_mm"] < 1.0
    rc, out, _ = run(["lookup", *args], capsys)
    assert rc in (0, 1) and json.loads(out)["table_checksum"] == doc["sha256"]
    rc, out, _ = run(["adopt", "--table", str(table_path)], capsys)  # again: nothing changes
    assert rc == 0 and not json.loads(out)["adopted"]
    rc, _, err = run(["adopt", "--table", str(tmp_path / "none.csv")], capsys)
    assert rc == 2 and "no such file" in err
