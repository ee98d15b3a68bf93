"""The start-up reconciliation (docs/runtime.md, "Interrupted trials"): every run folder gets
a ledger row, from what its trace and recording say; nothing else is touched."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from mecharm.common.layout import DataRoot
from mecharm.runtime.records.ledger import append_row, verify_ledger
from mecharm.runtime.records.reconcile import INTERRUPTED, reconcile_run_folders

CUT = "run_0002_20261203_100000"


def _trace(layout: DataRoot, stem: str, lines: list[dict]) -> None:
    layout.run_dir(stem).mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps({"seq": i + 1, **e}) + "\n" for i, e in enumerate(lines))
    layout.trace(stem).write_text(text + '{"seq": 99, "event": "inp')  # the kill's cut tail


def _rows(layout: DataRoot) -> dict[str, dict[str, str]]:
    return {r["run_stem"]: r for r in csv.DictReader(layout.ledger.read_text().splitlines())}


def test_a_cut_trial_gets_an_interrupted_row_from_its_trace(tmp_path: Path) -> None:
    layout = DataRoot(tmp_path)
    done = "run_0001_20261203_095900"
    layout.run_dir(done).mkdir(parents=True)
    append_row(layout.ledger, {"run_stem": done, "status": "completed", "dry_run": False})
    _trace(layout, CUT, [
        {"event": "trial", "stage": "start", "dry_run": False, "scene_seed": 8, "ts": 100.0},
        {"event": "input", "stage": "detect", "kind": "scene", "ts": 101.0,
         "value": {"ok": True, "block_xz": [0.1, 0.2], "box_xz": [-0.2, 0.15]}},
        {"event": "transition", "stage": "detect", "frm": "detect", "to": "approach_pick", "ts": 102.0},
        {"event": "input", "stage": "lift_and_judge", "kind": "pick_verdict", "ts": 104.0,
         "value": {"verdict": "yes", "confidence": 0.9}},
        {"event": "transition", "stage": "lift_and_judge", "frm": "lift_and_judge",
         "to": "approach_place", "ts": 104.5},
    ])  # fmt: skip
    (layout.run_folders / "notes").mkdir()  # not a run: left alone
    got = reconcile_run_folders(tmp_path)
    assert [(r.run_stem, r.status, r.recording_status) for r in got] == [(CUT, INTERRUPTED, "none")]
    row = _rows(layout)[CUT]
    assert row["status"] == "interrupted" and row["scene_seed"] == "8"
    assert row["reason"].startswith("interrupted during approach_place")
    assert "stages reached: approach_pick > approach_place" in row["reason"]
    assert row["pick_verdict"] == "yes" and row["place_verdict"] == ""
    assert row["duration_s"] == "4.5" and row["box_x"] == "-0.2"
    assert verify_ledger(layout.ledger).ok
    assert reconcile_run_folders(tmp_path) == []  # once on the books, never again
    assert _rows(layout)[done]["status"] == "completed"


def test_a_result_whose_row_was_lost_keeps_its_status(tmp_path: Path) -> None:
    layout = DataRoot(tmp_path)
    _trace(layout, CUT, [
        {"event": "trial", "stage": "start", "dry_run": True, "scene_seed": None, "ts": 10.0},
        {"event": "result", "stage": "end", "status": "stopped", "reason": "detect: no block", "ts": 12.0},
    ])  # fmt: skip
    (got,) = reconcile_run_folders(tmp_path)
    assert got.status == "stopped"
    row = _rows(layout)[CUT]
    assert row["reason"] == "detect: no block (row written at the next start)"
    assert row["dry_run"] == "1"


def test_a_folder_without_a_trace_and_a_link_out_of_the_root(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    layout = DataRoot(root)
    layout.run_dir(CUT).mkdir(parents=True)  # killed before the trace's first line
    outside.mkdir()
    (layout.run_folders / "run_0003_20261203_100100").symlink_to(outside)
    (got,) = reconcile_run_folders(root)
    assert got.run_stem == CUT and got.reason.startswith("interrupted: no trace in its run folder")
    assert list(outside.iterdir()) == []
    assert "run_0003_20261203_100100" not in _rows(layout)
