"""Correction and height memories: keys, EMA rule, atomic files, corrupt entries skipped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from mecharm_common.layout import DataRoot
from mecharm_runtime.memories import CorrectionMemory, HeightMemory, cell_key


def test_cell_key_matches_reference_format() -> None:
    assert cell_key("pick", 0.20, 0.26) == "pick_x200_z260"
    assert cell_key("pick", 0.209, 0.251) == "pick_x200_z260"
    assert cell_key("place", -0.2, 0.18) == "place_x-200_z180"
    with pytest.raises(ValueError):
        cell_key("pick", float("nan"), 0.1)


def test_correction_ema_from_successful_pick(tmp_path: Path) -> None:
    path = DataRoot(tmp_path).correction_memory
    mem = CorrectionMemory(path)
    c1 = mem.update("pick_x200_z260", 0.0, 0.0, tip_dx_mm=6.0, tip_dz_mm=-4.0, alpha=0.5)
    assert (c1.dx_mm, c1.dz_mm, c1.n) == (6.0, -4.0, 1)
    # next pick aimed with Δ=(6,-4) and landed 2 mm off in x: bias estimate 8 → EMA 7
    c2 = mem.update("pick_x200_z260", 6.0, -4.0, tip_dx_mm=2.0, tip_dz_mm=0.0, alpha=0.5)
    assert (c2.dx_mm, c2.dz_mm, c2.n) == (7.0, -4.0, 2)
    mem.save()
    again = CorrectionMemory(path)
    assert again.get("pick_x200_z260") == c2
    assert not list(path.parent.glob(".*tmp"))


def test_corrupt_entry_skipped_and_logged(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(
        json.dumps(
            {
                "entries": {
                    "pick_x200_z260": {"dx_mm": 3, "dz_mm": 1, "n": 2},
                    "pick_x220_z260": {"dx_mm": "NaN", "dz_mm": 1, "n": 2},
                    "pick_x240_z260": {"dx_mm": 1e999, "dz_mm": 1, "n": 2},
                    "pick_x260_z260": [1, 2],
                }
            }
        )
    )
    with capture_logs() as logs:
        mem = CorrectionMemory(path)
    assert mem.get("pick_x200_z260") is not None
    assert sorted(mem.skipped) == ["pick_x220_z260", "pick_x240_z260", "pick_x260_z260"]
    assert all(mem.get(k) is None for k in mem.skipped)
    assert sum(1 for e in logs if e["event"] == "memory_entry_corrupt_skipped") == 3


def test_unparseable_file_moved_aside_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text("{{{ garbage")
    with capture_logs() as logs:
        mem = CorrectionMemory(path)
    assert mem.entries == {}
    aside = list(tmp_path.glob("c.json.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_text() == "{{{ garbage"
    assert any(e["event"] == "memory_file_corrupt" for e in logs)


def test_height_memory_raises_on_failed_place_only(tmp_path: Path) -> None:
    mem = HeightMemory(tmp_path / "h.json")
    key = "place_x-200_z180"
    assert mem.get(key) is None
    assert mem.update(key, placed_ok=False, step_mm=5, max_mm=15) == 5
    assert mem.update(key, placed_ok=True, step_mm=5, max_mm=15) == 5
    for _ in range(5):
        mem.update(key, placed_ok=False, step_mm=5, max_mm=15)
    assert mem.get(key) == 15
    mem.save()
    assert HeightMemory(tmp_path / "h.json").entries[key]["n"] == 7
