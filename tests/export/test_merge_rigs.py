"""Several rigs into one dataset: one export run per data root, episodes by (rig id, run stem).

Two real data roots whose trials have the same run stems (each rig counts from
run_0000); the second export appends, every episode keeps its rig id and outcome, and
re-running either root adds nothing (docs/lerobot-outcomes.md, "Several rigs").
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from mecharm.tools.export import layout as L
from mecharm.tools.export.config import ExportSettings
from mecharm.tools.export.lerobot import export_lerobot
from mecharm.tools.export.verify import verify_dataset

RECORDED = ExportSettings(progress=False, select="recorded")


def _rig(recs: Any, root: Path, verdicts: list[tuple[str, str]], seed: int) -> None:
    for i, (pick, place) in enumerate(verdicts):
        trial = recs.write(root, recs.stem(i), seed=seed + i, duration=2.5 + 0.5 * i)
        recs.ledger(root, trial, pick=pick, place=place)


def _episodes(out: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in sorted((out / "meta/episodes").rglob("*.parquet")):
        rows += pq.read_table(path).to_pylist()
    return sorted(rows, key=lambda r: r["episode_index"])


def _frames(out: Path) -> dict[str, list[Any]]:
    cols: dict[str, list[Any]] = {}
    for path in sorted((out / "data").rglob("*.parquet")):
        for k, v in pq.read_table(path).to_pydict().items():
            cols.setdefault(k, []).extend(v)
    return cols


def test_two_rigs_with_the_same_run_stems_go_into_one_dataset(recs: Any, tmp_path: Path) -> None:
    a = recs.new_root(tmp_path / "a", "data")
    b = recs.new_root(tmp_path / "b", "data")  # the same folder name: rig ids from the run logs
    _rig(recs, a, [("yes", "yes"), ("yes", "no")], seed=0)
    _rig(recs, b, [("no", ""), ("yes", "yes"), ("yes", "yes")], seed=10)
    for i in range(2):
        recs.runlog(a, recs.stem(i), rig_id="rig-a")
    for i in range(3):
        recs.runlog(b, recs.stem(i), rig_id="rig-b", judge="vlm")
    out = tmp_path / "ds"
    first = export_lerobot(a, out, RECORDED)
    second = export_lerobot(b, out, RECORDED)
    assert [e.episode_index for e in first.exported] == [0, 1]
    assert [(e.episode_index, e.rig_id) for e in second.exported] == [
        (2, "rig-b"),
        (3, "rig-b"),
        (4, "rig-b"),
    ]
    assert second.total_episodes == 5 and not second.already
    # again: nothing new from either rig
    for root in (a, b):
        again = export_lerobot(root, out, RECORDED)
        assert not again.exported and len(again.already) == (2 if root == a else 3)
    assert verify_dataset(out).ok

    eps = _episodes(out)
    got = [
        (e["mecharm/rig_id"], e["mecharm/run_stem"], e["mecharm/judge"], e[L.SUCCESS_COLUMN])
        for e in eps
    ]
    assert got == [
        ("rig-a", recs.stem(0), "geometric", True),
        ("rig-a", recs.stem(1), "geometric", False),
        ("rig-b", recs.stem(0), "vlm", False),
        ("rig-b", recs.stem(1), "vlm", True),
        ("rig-b", recs.stem(2), "vlm", True),
    ]
    frames = _frames(out)
    for e in eps:
        lo, hi = e["dataset_from_index"], e["dataset_to_index"]
        assert set(frames["mecharm.rig_id"][lo:hi]) == {e["mecharm/rig_id"]}
        assert set(frames["mecharm.run_stem"][lo:hi]) == {e["mecharm/run_stem"]}
        assert frames["next.success"][hi - 1] is e[L.SUCCESS_COLUMN]
        assert not any(frames["next.success"][lo : hi - 1])
    manifest = json.loads((out / L.MANIFEST_PATH).read_text())
    assert [(m["rig_id"], m["run_stem"]) for m in manifest["episodes"]] == [g[:2] for g in got]
    assert [r["root"] for r in manifest["runs"]] == [str(a.resolve()), str(b.resolve())]
    stats = json.loads((out / L.STATS_PATH).read_text())
    assert stats["next.success"]["count"] == [len(frames["index"])]
    assert abs(stats["next.success"]["mean"][0] - 3 / len(frames["index"])) < 1e-12


def test_rigs_without_rig_id_in_their_run_logs_fall_back_to_root_name_or_flag(
    recs: Any, tmp_path: Path
) -> None:
    """Trials recorded before the runtime wrote rig ids: the data root's folder name, or
    --rig-id; two roots of the same name need the flag, else the second is 'kept'."""
    a = recs.new_root(tmp_path, "bench-left")
    b = recs.new_root(tmp_path / "copy", "bench-left")
    _rig(recs, a, [("yes", "yes")], seed=0)
    _rig(recs, b, [("yes", "yes")], seed=20)
    out = tmp_path / "ds"
    export_lerobot(a, out, RECORDED)
    same_name = export_lerobot(b, out, RECORDED)
    assert not same_name.exported
    assert [s.reason for s in same_name.already] == ["already exported as episode 0"]
    flagged = export_lerobot(b, out, RECORDED.model_copy(update={"rig_id": "bench-right"}))
    assert [(e.episode_index, e.rig_id) for e in flagged.exported] == [(1, "bench-right")]
    assert [e["mecharm/rig_id"] for e in _episodes(out)] == ["bench-left", "bench-right"]
    assert verify_dataset(out).ok


def test_the_same_recordings_from_another_folder_or_rig_id_are_kept_not_added(
    recs: Any, tmp_path: Path
) -> None:
    """Trials without a run-log rig id get the fallback (the folder name, or --rig-id) on
    every run; a copy of the root under another name, or another --rig-id, must not add
    them again: the same recording files are the same trial (docs/lerobot-outcomes.md)."""
    a = recs.new_root(tmp_path, "bench-left")
    _rig(recs, a, [("yes", "yes"), ("yes", "no"), ("no", "")], seed=0)
    out = tmp_path / "ds"
    first = export_lerobot(a, out, RECORDED)
    assert len(first.exported) == 3
    copy = tmp_path / "elsewhere" / "bench-left-copy"
    shutil.copytree(a, copy)
    moved = export_lerobot(copy, out, RECORDED)
    assert not moved.exported and not moved.refused
    assert sorted(s.run_stem for s in moved.already) == [recs.stem(i) for i in range(3)]
    for s in moved.already:
        n = int(s.run_stem.split("_")[1])
        assert s.reason.startswith(f"already exported as episode {n} (rig id bench-left, ")
        assert "the same recording files" in s.reason
    flagged = export_lerobot(a, out, RECORDED.model_copy(update={"rig_id": "bench-right"}))
    assert not flagged.exported and len(flagged.already) == 3
    assert len(_episodes(out)) == 3
    assert verify_dataset(out).ok
