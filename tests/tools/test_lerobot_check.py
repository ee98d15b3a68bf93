"""The lerobot check's own logic, without lerobot: arguments, judging the probe's facts,
the ledger-vs-success comparison, the report (docs/lerobot-check.md).

The facts below have the shape ``mecharm_dev/lerobot_probe.py`` writes; the real
package is only needed by ``make lerobot-check`` itself.
"""

from __future__ import annotations

import ast
import copy
import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mecharm.common.layout import DataRoot
from mecharm.runtime.pick_place.records import RECORDS
from mecharm_dev import lerobot_check as lc

LEDGER_COLUMNS = RECORDS.ledger_columns

PROBE = Path(lc.__file__).with_name("lerobot_probe.py")
STRINGS = ("run_stem", "rig_id", "pick_verdict", "place_verdict", "judge", "recording_status")


def _episode(index: int, length: int, stem: str, rig: str, placed: bool) -> dict[str, Any]:
    last = length - 1
    fields = {
        "run_stem": stem,
        "rig_id": rig,
        "pick_verdict": "yes",
        "place_verdict": "yes" if placed else "no",
        "judge": "geometric",
        "recording_status": "ok",
    }
    return {
        "episode_index": index,
        "length": length,
        "meta": {**{f"mecharm/{k}": v for k, v in fields.items()}, "mecharm/success": placed},
        "frames": length,
        "first_frame_index": 0,
        "last_frame_index": last,
        "frame_index_gaps": 0,
        "max_timestamp_offset_s": 1e-6,
        "success_frames": [last] if placed else [],
        "done_frames": [last],
        "reward_frames": [last] if placed else [],
        "reward_values": [1.0] if placed else [],
        "strings": {f"mecharm.{k}": [v] for k, v in fields.items()},
    }


def _facts(
    episodes: list[tuple[int, str, str, bool]], cameras: tuple[str, ...] = (lc.SIDE, lc.TOP)
) -> dict[str, Any]:
    """Facts of a dataset lerobot loaded cleanly: (length, stem, rig, placed) per episode."""
    eps = [_episode(i, n, stem, rig, ok) for i, (n, stem, rig, ok) in enumerate(episodes)]
    total = sum(n for n, *_ in episodes)
    features: dict[str, Any] = {
        "observation.state": {"dtype": "float32", "shape": [7]},
        "timestamp": {"dtype": "float32", "shape": [1]},
        "next.reward": {"dtype": "float32", "shape": [1]},
        "next.done": {"dtype": "bool", "shape": [1]},
        "next.success": {"dtype": "bool", "shape": [1]},
        **{f"mecharm.{k}": {"dtype": "string", "shape": [1]} for k in STRINGS},
    }
    shapes = {lc.SIDE: [720, 1280, 3], lc.TOP: [480, 640, 3]}
    for cam in cameras:
        features[cam] = {"dtype": "video", "shape": shapes[cam]}
    return {
        "root": "/data/ds",
        "load_error": None,
        "errors": [],
        "errors_dropped": 0,
        "fps": 10.0,
        "total_episodes": len(eps),
        "total_frames": total,
        "len": total,
        "frames_seen": total,
        "index_contiguous": True,
        "features": features,
        "cameras": list(cameras),
        "episode_columns": ["episode_index", "length", *lc.META_FIELDS],
        "image_shapes": {c: [[3, *shapes[c][:2]]] for c in cameras},
        "image_range": {c: [0.0, 1.0] for c in cameras},
        "episodes": eps,
        "filter": {
            "episodes": [i for i, (_, _, _, ok) in enumerate(episodes) if ok],
            "expected_frames": sum(n for n, _, _, ok in episodes if ok),
            "frames": sum(n for n, _, _, ok in episodes if ok),
            "loaded_episodes": [i for i, (_, _, _, ok) in enumerate(episodes) if ok],
        },
    }


MIXED = [
    (50, "run_0001_a", "rig-a", True),
    (30, "run_0002_a", "rig-a", False),
    (40, "run_0003_a", "rig-a", True),
]


def _failed(checks: list[lc.Check]) -> dict[str, str]:
    return {c.name: c.detail for c in checks if not c.ok}


# --------------------------------------------------------------------------- arguments


def test_the_venv_comes_from_the_flag_then_the_environment_then_the_checkout(
    tmp_path: Path,
) -> None:
    assert lc.parse_args(["--venv", str(tmp_path / "v")], {}).venv == tmp_path / "v"
    env = {lc.VENV_ENV: str(tmp_path / "shared")}
    assert lc.parse_args([], env).venv == tmp_path / "shared"
    assert lc.parse_args([], {}).venv == lc.CHECKOUT / ".lerobot-venv"
    assert lc.parse_args([], {lc.VENV_ENV: "  "}).venv == lc.CHECKOUT / ".lerobot-venv"


def test_defaults_make_two_demo_rigs_of_mixed_outcomes() -> None:
    a = lc.parse_args([], {})
    assert (a.root, a.merge_root, a.select, a.trials, a.delete_episode) == (
        None,
        None,
        "recorded",
        4,
        0,
    )
    assert a.require_top is None  # decided per root: yes for a demo, no for --root
    assert lc.parse_args(["--no-require-top"], {}).require_top is False


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--trials", "0"], "--trials must be at least 1"),
        (["--delete-episode", "-1"], "--delete-episode must be 0 or more"),
        (["--root", "/nonexistent/lerobot-check-root"], "no such folder"),
    ],
)
def test_bad_arguments_are_named(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        lc.parse_args(argv, {})
    assert exc.value.code == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize(
    ("version", "ok"),
    [
        ("0.4.4", True),
        ("0.4.10", True),
        ("0.4.5rc1", True),
        ("0.4.3", False),
        ("0.5.0", False),
        ("1.0", False),
        ("", False),
        ("x.y", False),
    ],
)
def test_the_lerobot_version_range(version: str, ok: bool) -> None:
    assert lc.lerobot_version_ok(version) is ok


def test_a_missing_venv_without_install_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(lc.CheckError) as exc:
        lc.ensure_venv(tmp_path / "none", install=False)
    msg = str(exc.value)
    assert "--no-install" in msg and "--venv" in msg and lc.VENV_ENV in msg
    assert not (tmp_path / "none").exists()


def test_main_without_a_venv_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = lc.main(["--venv", str(tmp_path / "none"), "--no-install", "--work", str(tmp_path / "w")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "no lerobot in" in err and "Traceback" not in err


# --------------------------------------------------------------------------- one dataset


def test_a_clean_dataset_passes_every_check() -> None:
    checks = lc.dataset_checks(_facts(MIXED), "dataset A", require_top=True, expect_meta=True)
    assert _failed(checks) == {}
    cams = next(c for c in checks if c.name == "dataset A cameras")
    assert cams.detail.startswith("2 cameras") and "observation.images.top 3x480x640" in cams.detail


def test_a_side_only_dataset_reports_one_camera_and_fails_only_when_top_is_required() -> None:
    facts = _facts(MIXED, cameras=(lc.SIDE,))
    cams = next(
        c
        for c in lc.dataset_checks(facts, "A", require_top=False, expect_meta=True)
        if c.name == "A cameras"
    )
    assert cams.ok and cams.detail.startswith("1 camera:")
    bad = _failed(lc.dataset_checks(facts, "A", require_top=True, expect_meta=True))
    assert "no observation.images.top camera" in bad["A cameras"]


def test_a_load_error_is_one_failed_check_naming_the_folder() -> None:
    facts = {"root": "/data/x", "load_error": "FileNotFoundError: meta/info.json"}
    checks = lc.dataset_checks(facts, "dataset A", require_top=False, expect_meta=True)
    assert [(c.name, c.ok) for c in checks] == [("dataset A loads in lerobot", False)]
    assert "/data/x" in checks[0].detail and "meta/info.json" in checks[0].detail


def test_missing_outcome_and_field_columns_are_named() -> None:
    facts = _facts(MIXED)
    for k in ("next.done", "next.success", "mecharm.rig_id"):
        del facts["features"][k]
    facts["episode_columns"].remove("mecharm/success")
    bad = _failed(lc.dataset_checks(facts, "A", require_top=True, expect_meta=True))
    assert "no next.done feature" in bad["A outcome columns"]
    assert "no next.success feature" in bad["A outcome columns"]
    assert "mecharm.rig_id" in bad["A episode fields"]
    assert "meta/episodes lacks mecharm/success" in bad["A episode fields"]


def test_outcome_rules_name_the_episode_and_frames() -> None:
    facts = _facts(MIXED)
    facts["episodes"][1]["done_frames"] = [10, 29]  # done before the end
    facts["episodes"][2]["reward_values"] = [0.5]  # reward without the full 1.0
    facts["episodes"][0]["success_frames"] = [3, 49]  # success before the last frame
    detail = _failed(lc.dataset_checks(facts, "A", require_top=True, expect_meta=True))[
        "A outcome columns"
    ]
    assert "A episode 1: next.done on frames [10, 29], expected only the last (29)" in detail
    assert "A episode 2: next.reward [0.5]" in detail
    assert "A episode 0: next.success on frames [3, 49]" in detail


def test_frames_timestamps_and_images_are_checked_per_episode() -> None:
    facts = _facts(MIXED)
    facts["episodes"][2]["frames"] = 39
    facts["frames_seen"] -= 1
    facts["episodes"][1]["max_timestamp_offset_s"] = 0.05
    facts["image_shapes"][lc.TOP] = [[3, 480, 640], [3, 240, 320]]
    facts["errors"] = ["frame 7 of the dataset: RuntimeError: decode failed"]
    bad = _failed(lc.dataset_checks(facts, "A", require_top=True, expect_meta=True))
    assert "A episode 2: 39 frames read, meta length 40" in bad["A every frame"]
    assert "frame 7 of the dataset" in bad["A every frame"]
    assert "A episode 1: timestamp off frame_index/fps by 0.050000 s" in bad["A timestamps"]
    assert "observation.images.top: image tensors" in bad["A cameras"]


def test_meta_and_frames_must_agree_where_both_exist() -> None:
    facts = _facts(MIXED)
    facts["episodes"][1]["meta"]["mecharm/success"] = True
    facts["episodes"][0]["meta"]["mecharm/rig_id"] = "other"
    detail = _failed(lc.dataset_checks(facts, "A", require_top=True, expect_meta=True))[
        "A episode fields"
    ]
    assert "meta mecharm/success True, frames say False" in detail
    assert "meta mecharm/rig_id 'other', frames 'rig-a'" in detail


def test_after_lerobots_delete_the_meta_columns_are_not_required() -> None:
    facts = _facts(MIXED)
    facts["episode_columns"] = ["episode_index", "length"]
    for e in facts["episodes"]:
        e["meta"] = {}
    assert (
        _failed(lc.dataset_checks(facts, "after delete", require_top=True, expect_meta=False)) == {}
    )
    recs = lc.episode_records(facts)
    assert [(r.run_stem, r.success, r.meta_success) for r in recs] == [
        ("run_0001_a", True, None),
        ("run_0002_a", False, None),
        ("run_0003_a", True, None),
    ]


def test_records_fall_back_to_the_meta_columns() -> None:
    facts = _facts(MIXED)
    for e in facts["episodes"]:
        e["strings"] = {}
    recs = lc.episode_records(facts)
    assert recs[1].run_stem == "run_0002_a" and recs[1].rig_id == "rig-a"
    assert recs[1].place_verdict == "no" and recs[1].meta_success is False


# --------------------------------------------------------------------------- success vs the ledger


def _ledger_rows() -> list[dict[str, str]]:
    return [
        {"run_stem": "run_0001_a", "pick_verdict": "yes", "place_verdict": "yes"},
        {"run_stem": "run_0002_a", "pick_verdict": "yes", "place_verdict": ""},
        {"run_stem": "run_0003_a", "pick_verdict": "yes", "place_verdict": "yes"},
        {"run_stem": "run_0004_a", "pick_verdict": "no", "place_verdict": "yes"},
    ]


def test_placed_means_pick_and_place_yes() -> None:
    assert lc.placed_stems(_ledger_rows()) == {
        "run_0001_a": True,
        "run_0002_a": False,
        "run_0003_a": True,
        "run_0004_a": False,
    }


def test_success_matching_the_ledger_prints_both_lists() -> None:
    check, lines = lc.compare_success(
        lc.episode_records(_facts(MIXED)), lc.placed_stems(_ledger_rows()), "A"
    )
    assert check.ok, check.detail
    assert lines[0].endswith("['run_0001_a', 'run_0003_a']")
    assert lines[1].endswith("['run_0001_a', 'run_0003_a']")
    assert lines[2].strip() == "match: yes"


def test_a_success_the_ledger_does_not_know_fails_both_ways() -> None:
    placed = lc.placed_stems(_ledger_rows())
    placed["run_0001_a"] = False  # the dataset says success, the ledger does not
    placed["run_0002_a"] = True  # the ledger says placed, the dataset does not
    check, lines = lc.compare_success(lc.episode_records(_facts(MIXED)), placed, "A")
    assert not check.ok
    assert "next.success set on ['run_0001_a'], not placed in the ledger" in check.detail
    assert "placed in the ledger but next.success not set: ['run_0002_a']" in check.detail
    assert lines[2].strip() == "match: NO"


def test_placed_trials_left_out_of_the_dataset_are_listed_not_failed() -> None:
    rows = [
        *_ledger_rows(),
        {"run_stem": "run_0009_a", "pick_verdict": "yes", "place_verdict": "yes"},
    ]
    check, lines = lc.compare_success(lc.episode_records(_facts(MIXED)), lc.placed_stems(rows), "A")
    assert check.ok
    assert "not in the dataset" in lines[-1] and "run_0009_a" in lines[-1]


def test_no_success_column_or_unknown_stem_fails_clearly() -> None:
    facts = _facts(MIXED)
    del facts["features"]["next.success"]
    for e in facts["episodes"]:
        e["strings"] = {}
        e["meta"] = {}
    check, _ = lc.compare_success(lc.episode_records(facts), lc.placed_stems(_ledger_rows()), "A")
    assert "no next.success feature" in check.detail
    assert "episodes [0, 1, 2] have no run stem" in check.detail
    check, _ = lc.compare_success(lc.episode_records(_facts(MIXED)), {"run_0001_a": True}, "A")
    assert "run_0002_a" in check.detail and "not in the ledger" in check.detail


def test_the_ledger_is_read_from_the_data_root(tmp_path: Path) -> None:
    path = DataRoot(tmp_path).ledger
    path.parent.mkdir(parents=True)
    with open(path, "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=LEDGER_COLUMNS)
        w.writeheader()
        for r in _ledger_rows():
            w.writerow({c: r.get(c, "") for c in LEDGER_COLUMNS})
    assert lc.placed_stems(lc.read_ledger(tmp_path))["run_0003_a"] is True
    assert lc.read_ledger(tmp_path / "nowhere") == []


# --------------------------------------------------------------------------- filter, delete, merge


def test_the_success_filter() -> None:
    assert lc.filter_check(_facts(MIXED), "A").ok
    facts = _facts(MIXED)
    facts["filter"]["frames"] = 50
    assert "gave 50 frames, expected 90" in lc.filter_check(facts, "A").detail
    none_placed = _facts([(30, "run_0002_a", "rig-a", False)])
    none_placed["filter"] = {
        "episodes": [],
        "expected_frames": 0,
        "skipped": "no episode succeeded",
    }
    assert lc.filter_check(none_placed, "A").ok
    assert not lc.filter_check(
        {"filter": {"skipped": "the dataset has no next.success feature"}}, "A"
    ).ok
    assert not lc.filter_check({}, "A").ok


def test_delete_keeps_the_others_in_order() -> None:
    before = lc.episode_records(_facts(MIXED))
    after_facts = _facts(MIXED[1:])
    assert lc.delete_check(before, lc.episode_records(after_facts), 0, "after delete").ok
    after_facts["episodes"][1]["success_frames"] = []  # the outcome of run_0003 lost
    after_facts["episodes"][0]["strings"]["mecharm.rig_id"] = ["rig-x"]
    detail = lc.delete_check(before, lc.episode_records(after_facts), 0, "after delete").detail
    assert "episode 1 (rig-a/run_0003_a) (was 2): success False (expected True)" in detail
    assert "rig_id 'rig-x' (expected 'rig-a')" in detail
    short = lc.delete_check(before, lc.episode_records(_facts(MIXED[1:2])), 0, "x")
    assert "x: 1 episodes, expected 2" in short.detail


def test_delete_takes_a_and_falls_back_to_the_merged_dataset() -> None:
    three = lc.episode_records(_facts(MIXED))
    assert lc.delete_source({"rig-a": three, "merged": three}, 0) == "rig-a"
    assert lc.delete_source({"rig-a": three[:1], "merged": three}, 0) == "merged"
    assert lc.delete_source({"rig-a": three, "merged": three}, 3) is None  # no episode 3
    assert lc.delete_source({"rig-a": three[:1]}, 0) is None


def test_merge_keeps_every_rig_and_outcome() -> None:
    a = lc.episode_records(_facts(MIXED))
    b_eps = [(20, "run_0001_a", "rig-b", False), (25, "run_0002_b", "rig-b", True)]
    b = lc.episode_records(_facts(b_eps))
    merged_facts = _facts(MIXED + b_eps)
    check = lc.merge_check([a, b], lc.episode_records(merged_facts), "after merge")
    assert check.ok, check.detail
    assert (
        "rigs ['rig-a', 'rig-b']" in check.detail
    )  # the same run stem on two rigs is two episodes
    lost = copy.deepcopy(merged_facts)
    lost["episodes"][3]["strings"]["mecharm.rig_id"] = ["rig-a"]
    detail = lc.merge_check([a, b], lc.episode_records(lost), "after merge").detail
    assert "rig_id 'rig-a' (expected 'rig-b')" in detail
    assert "(rig id, run stem) not unique: ['rig-a/run_0001_a']" in detail


def test_keeping_is_not_proved_by_episodes_without_fields() -> None:
    facts = _facts(MIXED)
    del facts["features"]["next.success"]
    for e in facts["episodes"]:
        e["strings"], e["meta"] = {}, {}
    blind = lc.episode_records(facts)
    assert "episodes [1, 2] carry no rig id" in lc.delete_check(blind, blind[1:], 0, "d").detail
    assert "carry no rig id" in lc.merge_check([blind], blind, "m").detail


def test_merge_notices_a_missing_part() -> None:
    a = lc.episode_records(_facts(MIXED))
    check = lc.merge_check([a, a[:1]], a, "after merge")
    assert not check.ok and "3 episodes, expected 4" in check.detail


# --------------------------------------------------------------------------- report


def test_the_report_lists_every_check_and_its_verdict() -> None:
    ok = [lc.Check("A loads in lerobot", True, "LeRobotDataset(root=/d)")]
    text = lc.format_report(["lerobot-check: lerobot 0.4.4"], ["", "dataset A: 2 episodes"], ok)
    assert text.splitlines()[0] == "lerobot-check: lerobot 0.4.4"
    assert "  ok    A loads in lerobot: LeRobotDataset(root=/d)" in text
    assert text.endswith("lerobot-check: ok, all 1 checks hold")
    bad = [*ok, lc.Check("A cameras", False, "A: no observation.images.top camera")]
    text = lc.format_report([], [], bad)
    assert "  FAIL  A cameras: A: no observation.images.top camera" in text
    assert text.endswith("lerobot-check: FAILED, 1 of 2 checks failed")
    assert lc.format_report([], [], []).endswith("no check ran")


def test_long_problem_lists_are_cut() -> None:
    check = lc._check("x", [f"p{i}" for i in range(10)], "")
    assert check.detail.endswith(f"and {10 - lc.MAX_LINES} more")


def test_episode_table_shows_rig_stem_and_success() -> None:
    rows = lc.episode_table(lc.episode_records(_facts(MIXED)))
    assert len(rows) == 4
    assert "rig-a" in rows[1] and "run_0001_a" in rows[1] and rows[1].rstrip().endswith("yes")
    assert rows[2].rstrip().endswith("no")


# --------------------------------------------------------------------------- the probe


def test_the_probe_imports_only_lerobot_torch_and_the_standard_library() -> None:
    tree = ast.parse(PROBE.read_text(encoding="utf-8"))
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            roots.add(node.module.split(".")[0])
    foreign = roots - set(sys.stdlib_module_names) - {"lerobot", "torch", "__future__"}
    assert foreign == set()
    assert "lerobot" in roots


def test_the_probe_without_lerobot_writes_a_load_error_not_a_traceback(tmp_path: Path) -> None:
    out = tmp_path / "facts.json"
    res = subprocess.run(
        [
            sys.executable,
            "-I",
            str(PROBE),
            "--repo-id",
            "m/x",
            "--root",
            str(tmp_path),
            "--out",
            str(out),
            "--backend",
            "pyav",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    facts = json.loads(out.read_text(encoding="utf-8"))
    if facts.get("load_error") is None:  # pragma: no cover - lerobot installed in the project venv
        pytest.skip("lerobot is importable here; the probe loaded instead")
    assert "lerobot" in facts["load_error"]
    checks = lc.dataset_checks(facts, "A", require_top=False, expect_meta=True)
    assert [c.ok for c in checks] == [False]


def test_a_probe_that_cannot_start_is_a_load_error(tmp_path: Path) -> None:
    facts = lc.probe(tmp_path / "no-venv", "mecharm/a", tmp_path / "ds", tmp_path, "auto", True)
    assert "cannot run the lerobot probe" in facts["load_error"]
