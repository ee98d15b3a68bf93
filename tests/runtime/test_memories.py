"""Correction and height memories: keys, EMA rule, atomic files, corrupt entries skipped."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import structlog
from structlog.testing import capture_logs

from mecharm.common.layout import DataRoot
from mecharm.common.logging import configure_logging
from mecharm.runtime.memories import (
    CORRECTION_LIMIT_MM,
    HEIGHT_LIMIT_MM,
    CorrectionMemory,
    HeightMemory,
    cell_key,
)


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


# ---------------------------------------------------------------- plausibility bounds


@pytest.mark.parametrize(
    ("entry", "field", "shown"),
    [
        ({"dx_mm": 1e308, "dz_mm": 1.0, "n": 3}, "dx_mm", "1e+308"),
        ({"dx_mm": 2.0, "dz_mm": -1e308, "n": 3}, "dz_mm", "-1e+308"),
        ({"dx_mm": 40.5, "dz_mm": 0.0, "n": 1}, "dx_mm", "40.5"),
        ({"dx_mm": 2.0, "dz_mm": 1.0, "n": 10**30}, "n", str(10**30)),
    ],
    ids=["1e308", "-1e308", "just-over", "huge-n"],
)
def test_implausible_correction_is_rejected_at_load_naming_entry_and_value(
    tmp_path: Path, entry: dict[str, float], field: str, shown: str
) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"entries": {"pick_x200_z260": entry, "pick_x180_z240": GOOD}}))
    with capture_logs() as logs:
        mem = CorrectionMemory(path)
    assert mem.get("pick_x200_z260") is None  # never applied: correct_aim aims at the block
    assert mem.get("pick_x180_z240") is not None
    assert mem.skipped == ["pick_x200_z260"]
    [err] = [e for e in logs if e["event"] == "memory_entry_implausible"]
    assert err["log_level"] == "error" and err["key"] == "pick_x200_z260"
    assert err["field"] == field and err["value"] == shown and str(path) in err["action"]


GOOD = {"dx_mm": -12.5, "dz_mm": 39.9, "n": 100_000}


def test_nan_as_a_string_is_rejected_too(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('{"entries": {"pick_x200_z260": {"dx_mm": "NaN", "dz_mm": 1, "n": 2},'
                    ' "pick_x220_z260": {"dx_mm": NaN, "dz_mm": 1, "n": 2}}}')  # fmt: skip
    with capture_logs() as logs:
        mem = CorrectionMemory(path)
    assert mem.entries == {}
    errs = [e for e in logs if e["event"] == "memory_entry_corrupt_skipped"]
    assert [e["key"] for e in errs] == ["pick_x200_z260", "pick_x220_z260"]
    assert all(e["log_level"] == "error" and "'NaN'" in errs[0]["entry"] for e in errs)


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"dee_y_mm": 1e308, "n": 1}, "dee_y_mm"),
        ({"dee_y_mm": -1e308, "n": 1}, "dee_y_mm"),
        ({"dee_y_mm": -5.0, "n": 1}, "dee_y_mm"),
        ({"dee_y_mm": 80.5, "n": 1}, "dee_y_mm"),
        ({"dee_y_mm": 5.0, "n": 10**30}, "n"),
        ({"dee_y_mm": 5.0, "n": -1}, "n"),
    ],
)
def test_implausible_height_is_rejected_at_load(
    tmp_path: Path, entry: dict[str, float], field: str
) -> None:
    path = tmp_path / "h.json"
    path.write_text(json.dumps({"entries": {"place_x-200_z180": entry,
                                            "place_x-180_z180": {"dee_y_mm": 80.0, "n": 0}}}))  # fmt: skip
    with capture_logs() as logs:
        mem = HeightMemory(path)
    assert mem.get("place_x-200_z180") is None and mem.get("place_x-180_z180") == 80.0
    [err] = [e for e in logs if e["event"] == "memory_entry_implausible"]
    assert err["key"] == "place_x-200_z180" and err["field"] == field


def test_the_operator_sees_the_rejection_on_the_console(tmp_path: Path) -> None:
    """One line on the console stream (what the trial start prints), naming entry and value."""
    path = tmp_path / "c.json"
    path.write_text(
        json.dumps({"entries": {"pick_x200_z260": {"dx_mm": 1e308, "dz_mm": 0, "n": 1}}})
    )
    stream = io.StringIO()
    saved = structlog.get_config()
    try:
        configure_logging("warning", json=False, stream=stream)
        CorrectionMemory(path)
    finally:
        structlog.configure(**saved)
    [line] = stream.getvalue().splitlines()
    assert "memory_entry_implausible" in line and "pick_x200_z260" in line and "1e+308" in line
    assert "error" in line and "fix or delete" in line


def test_updates_stay_inside_the_bounds(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    mem = CorrectionMemory(path)
    with capture_logs() as logs:
        c = mem.update("pick_x200_z260", 20.0, -20.0, tip_dx_mm=500.0, tip_dz_mm=-500.0, alpha=0.5)
    assert (c.dx_mm, c.dz_mm) == (CORRECTION_LIMIT_MM, -CORRECTION_LIMIT_MM)
    assert any(e["event"] == "correction_update_bounded" for e in logs)
    mem.save()
    assert CorrectionMemory(path).get("pick_x200_z260") == c  # what is written loads again
    heights = HeightMemory(tmp_path / "h.json")
    for _ in range(30):
        heights.learn_failed("place_x-200_z180", "lost", None, step_mm=5, max_mm=1000)
    assert heights.get("place_x-200_z180") == HEIGHT_LIMIT_MM[1]


def test_config_cannot_set_maxima_beyond_the_bounds() -> None:
    from mecharm.common.config import ConfigError, load_settings
    from mecharm.runtime.config import RuntimeSettings

    with pytest.raises(ConfigError, match="max_correction_mm"):
        load_settings(RuntimeSettings, None, {"max_correction_mm": CORRECTION_LIMIT_MM + 1})
    with pytest.raises(ConfigError, match="height_max_mm"):
        load_settings(RuntimeSettings, None, {"height_max_mm": HEIGHT_LIMIT_MM[1] + 1})


def test_a_new_place_cell_starts_from_the_highest_learnt_cell(tmp_path: Path) -> None:
    """One block lost on the box anywhere lifts
    where every new cell starts, as the arm that held it so low holds it so low everywhere."""
    heights = HeightMemory(tmp_path / "h.json")
    assert heights.highest() is None
    kw = {"step_mm": 5.0, "max_mm": 30.0, "raise_margin_mm": 10.0}
    for _ in range(3):
        heights.learn("place_x-200_z180", True, 20.0, **kw)  # 0 -> 15
    up = heights.learn_failed("place_x-160_z220", "lost", None, step_mm=15.0, max_mm=60.0,
                              start_mm=15.0)  # fmt: skip
    assert (up.old_mm, up.dee_y_mm, up.change) == (15.0, 30.0, "raise")
    assert heights.highest() == 30.0
    # a new cell that started its band there learns on from there; a known cell ignores it
    up = heights.learn("place_x-180_z200", True, 20.0, start_mm=30.0, **kw)
    assert (up.old_mm, up.dee_y_mm) == (30.0, 30.0)  # at height_max_mm already
    assert heights.learn("place_x-200_z180", True, 2.0, start_mm=0.0, **kw).old_mm == 15.0
    heights.entries["place_x-100_z100"] = {"dee_y_mm": 70.0, "n": 0}  # never placed: no vote
    assert heights.highest() == 30.0


def test_lost_blocks_may_raise_a_cell_past_height_max_and_good_places_keep_it(
    tmp_path: Path,
) -> None:
    """A loss is evidence that the block hung too low: it raises the cell up to
    ``height_lost_max_mm``; ``height_max_mm`` bounds only the raises after good places, and a
    good place never pulls a cell down to it. A place judged no lowers it one step."""
    heights = HeightMemory(tmp_path / "h.json")
    key = "place_x-200_z180"
    seen = [
        heights.learn_failed(key, "lost", None, step_mm=15.0, max_mm=60.0, start_mm=15.0).dee_y_mm
        for _ in range(5)
    ]
    assert seen == [30.0, 45.0, 60.0, 60.0, 60.0]
    kw = {"step_mm": 5.0, "max_mm": 30.0, "raise_margin_mm": 10.0}
    assert heights.learn(key, True, 20.0, **kw).dee_y_mm == 60.0  # placed well: kept
    assert heights.learn(key, True, 2.0, **kw).dee_y_mm == 60.0  # narrow: kept
    assert heights.learn(key, False, None, **kw).dee_y_mm == 55.0  # judged no: one step down
    # a refused release keeps it, whatever the bound
    assert heights.learn_failed(key, "refused", 1.0, step_mm=5.0, max_mm=30.0).dee_y_mm == 55.0


def test_a_memory_symlinked_out_of_the_root_is_neither_read_nor_written(tmp_path: Path) -> None:
    from mecharm.common.fsutil import OutsideRootError, StorageFault
    from mecharm.runtime.memories import HeightMemory

    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "height.json").write_text('{"version": 1, "kind": "height", "entries": {}}')
    (root / "memories").symlink_to(outside, target_is_directory=True)
    mem = HeightMemory(root / "memories" / "height.json", root=root)
    assert mem.entries == {}
    with pytest.raises(OutsideRootError) as caught:
        mem.save()
    assert isinstance(caught.value, StorageFault)  # the trial's backlog keeps it, no crash
    assert [p.name for p in outside.iterdir()] == ["height.json"]
    assert (outside / "height.json").read_text().endswith("{}}")


def test_the_held_block_memory_remembers_forgets_and_takes_a_bad_file_as_held(
    tmp_path: Path,
) -> None:
    from mecharm.runtime.memories import HeldBlockMemory

    mem = HeldBlockMemory(tmp_path / "memories" / "held_block.json")
    assert mem.recall() is None
    mem.remember("run_0003_20261204_120000", "seen")
    got = mem.recall()
    assert got is not None and got["run_stem"] == "run_0003_20261204_120000"
    assert got["evidence"] == "seen"
    mem.forget()
    assert mem.recall() is None and not mem.path.exists()
    for bad in ("{not json", "[1, 2]", '{"event": "x"}'):
        mem.path.write_text(bad)
        left = mem.recall()
        assert left is not None  # unreadable or odd: taken as held, never as "nothing held"
