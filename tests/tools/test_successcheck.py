"""The success check (docs/success.md): its geometry and flags on hand-made truths, the truth
tap on a stand-in scene server, its arguments, and one real run of the demo's path."""

from __future__ import annotations

import csv
import http.server
import io
import json
import math
import random
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from mecharm.common.layout import FK_DIR
from mecharm.runtime.console import RuntimeConsole
from mecharm.runtime.records.ledger import RecordingInfo
from mecharm.runtime.trial import TrialSummary
from mecharm.sim.physics import classify_drop
from mecharm.sim.scene import BLOCK_SIZE_M, BOX_INNER_M, yaw_rotation
from mecharm_dev import successcheck as sc

HALF_IN_MM = BOX_INNER_M / 2 * 1000
HALF_BLOCK_MM = BLOCK_SIZE_M / 2 * 1000


def _box(x: float = -0.2, z: float = 0.2, yaw: float = 0.0) -> dict[str, Any]:
    return {"x": x, "z": z, "yaw_deg": yaw, "inner_m": BOX_INNER_M}


def _block(x: float, z: float, yaw: float = 0.0, on: str = "gripper") -> dict[str, Any]:
    return {"x": x, "y": 0.06, "z": z, "yaw_deg": yaw, "upright": True, "resting_on": on}


def _truth(block: dict[str, Any], box: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    return {"block": block, "box": box or _box(), "grasped": True, "events": [], **kw}


# ---------------------------------------------------------------- footprint margin
def test_margin_of_a_square_block_centred_and_offset() -> None:
    assert sc.footprint_margin_mm(_block(-0.2, 0.2), _box()) == pytest.approx(
        HALF_IN_MM - HALF_BLOCK_MM
    )
    # 20 mm towards a wall: that wall is 20 mm nearer
    assert sc.footprint_margin_mm(_block(-0.18, 0.2), _box()) == pytest.approx(
        HALF_IN_MM - HALF_BLOCK_MM - 20
    )
    # over the wall: negative
    assert sc.footprint_margin_mm(_block(-0.2, 0.23), _box()) == pytest.approx(
        HALF_IN_MM - HALF_BLOCK_MM - 30
    )


def test_margin_turns_with_the_block_and_the_box() -> None:
    diag = HALF_BLOCK_MM * math.sqrt(2)
    # the block at 45 deg in a square box: its corners reach half a diagonal
    assert sc.footprint_margin_mm(_block(-0.2, 0.2, 45), _box()) == pytest.approx(HALF_IN_MM - diag)
    # turned with the box, it is square to the walls again; a quarter turn changes nothing
    assert sc.footprint_margin_mm(_block(-0.2, 0.2, 30), _box(yaw=30)) == pytest.approx(
        HALF_IN_MM - HALF_BLOCK_MM
    )
    assert sc.footprint_margin_mm(_block(-0.2, 0.2, 90), _box()) == pytest.approx(
        HALF_IN_MM - HALF_BLOCK_MM
    )
    # 20 mm along the box's own x axis, the box turned 90 deg: 20 mm along the world's z
    moved = _block(-0.2, 0.22, 90)
    assert sc.footprint_margin_mm(moved, _box(yaw=90)) == pytest.approx(
        HALF_IN_MM - HALF_BLOCK_MM - 20
    )


def test_margin_agrees_with_the_simulators_own_landing_rule() -> None:
    """margin >= 0 exactly when the simulator would put a block released there in the box."""
    rng = random.Random(5)
    inside = outside = 0
    for _ in range(2000):
        box = (rng.uniform(-0.25, -0.15), rng.uniform(0.15, 0.25), rng.uniform(0, 90))
        bx, bz = box[0] + rng.uniform(-0.04, 0.04), box[1] + rng.uniform(-0.04, 0.04)
        yaw = rng.uniform(0, 360)
        margin = sc.footprint_margin_mm(_block(bx, bz, yaw), _box(*box))
        assert margin is not None
        if abs(margin) < 1e-6:
            continue
        in_box = classify_drop(bx, bz, yaw, box) == "box"
        assert (margin > 0) == in_box, (box, bx, bz, yaw, margin)
        inside += in_box
        outside += not in_box
    assert inside > 100 and outside > 100  # both sides were tried


def _rows(rot: tuple[float, ...]) -> list[list[float]]:
    return [list(rot[i : i + 3]) for i in (0, 3, 6)]


def test_the_hanging_blocks_shadow_and_tilt() -> None:
    upright = {**_block(-0.19, 0.2, 30), "rot": _rows(yaw_rotation(30))}
    assert sc.tilt_deg(upright) == pytest.approx(0.0, abs=1e-6)
    assert sc.shadow_margin_mm(upright, _box(yaw=10)) == pytest.approx(
        sc.footprint_margin_mm(upright, _box(yaw=10))
    )
    # tipped 20 deg about the world's x axis: the shadow reaches further along z
    c, s_ = math.cos(math.radians(20)), math.sin(math.radians(20))
    tipped = {**_block(-0.2, 0.2), "rot": [[1, 0, 0], [0, c, -s_], [0, s_, c]]}
    assert sc.tilt_deg(tipped) == pytest.approx(20.0)
    shadow = sc.shadow_margin_mm(tipped, _box())
    assert shadow == pytest.approx(HALF_IN_MM - HALF_BLOCK_MM * (c + s_))
    # the release check carries both; would-land stays the footprint's
    r = sc.release_check(True, _truth(tipped))
    assert r.tilt_deg == pytest.approx(20.0) and r.shadow_margin_mm == pytest.approx(shadow)
    assert r.margin_mm == pytest.approx(HALF_IN_MM - HALF_BLOCK_MM) and r.would_land
    assert sc.shadow_margin_mm(_block(0, 0), _box()) is None and sc.tilt_deg(_block(0, 0)) is None


def test_margin_without_values_is_none() -> None:
    assert sc.footprint_margin_mm({}, _box()) is None
    assert sc.footprint_margin_mm(_block(0, 0), {"x": None, "z": 0}) is None


# ---------------------------------------------------------------- release checks
def test_release_check_against_the_truth() -> None:
    inside, outside = _truth(_block(-0.2, 0.2)), _truth(_block(-0.2, 0.24))
    ok = sc.release_check(True, inside)
    assert ok.would_land is True and not ok.wrong_confirm and not ok.wrong_refusal
    assert ok.margin_mm == pytest.approx(HALF_IN_MM - HALF_BLOCK_MM)
    wrong_refusal = sc.release_check(False, inside)
    assert wrong_refusal.wrong_refusal and not wrong_refusal.right_refusal
    right_refusal = sc.release_check(False, outside)
    assert right_refusal.right_refusal and not right_refusal.wrong_refusal
    assert right_refusal.margin_mm is not None and right_refusal.margin_mm < 0
    assert sc.release_check(True, outside).wrong_confirm
    # over the opening but not in the jaws: nothing would land
    empty = sc.release_check(True, {**inside, "grasped": False})
    assert empty.would_land is False and empty.wrong_confirm and empty.grasped is False
    unknown = sc.release_check(False, None)
    assert unknown.would_land is None and not unknown.wrong_refusal and not unknown.right_refusal


def test_a_capture_taken_after_the_jaws_acted_is_late() -> None:
    cap = sc.Capture("release_check", True, seen_ts=100.0)
    assert not cap.late  # no truth yet
    cap.truth = _truth(_block(-0.2, 0.2), events=[{"kind": "grasp", "ts": 90.0}])
    assert not cap.late
    cap.truth["events"].append({"kind": "knock", "ts": 101.0})  # not the jaws
    assert not cap.late
    cap.truth["events"].append({"kind": "release", "ts": 100.5})
    assert cap.late


# ---------------------------------------------------------------- flags
def _end(on: str, grasped: bool = False) -> dict[str, Any]:
    return _truth(_block(-0.2, 0.2, on=on), grasped=grasped, place_outcome=on)


def test_flags_from_the_end_truth_and_the_verdicts() -> None:
    def flags(**kw: Any) -> dict[str, bool | None]:
        base: dict[str, Any] = {
            "pick_verdict": "yes",
            "place_verdict": "yes",
            "block_held": False,
            "end": _end("box"),
            "pick_grasped": True,
        }
        return sc.truth_flags(**{**base, **kw})

    good = flags()
    assert good == {
        "placed_true": True,
        "false_placed": False,
        "missed_place": False,
        "false_held": False,
        "pick_wrong": False,
    }
    assert flags(end=_end("rim"))["false_placed"] is True
    assert flags(end=_end("rim"))["placed_true"] is False
    assert flags(place_verdict="no")["missed_place"] is True
    assert flags(place_verdict="-", end=_end("mat"))["false_placed"] is False
    # said to hold the block at the stop: the world's jaws decide
    assert flags(block_held=True, end=_end("gripper", grasped=True))["false_held"] is False
    assert flags(block_held=True, end=_end("mat"))["false_held"] is True
    assert flags(pick_grasped=False)["pick_wrong"] is True
    assert flags(pick_verdict="no", pick_grasped=False)["pick_wrong"] is False
    assert flags(pick_verdict="no", pick_grasped=True)["pick_wrong"] is True
    assert flags(pick_grasped=None)["pick_wrong"] is None
    unknown = flags(end=None)
    assert unknown["placed_true"] is None and unknown["false_placed"] is None
    assert unknown["false_held"] is None


def _summary(**kw: Any) -> TrialSummary:
    base: dict[str, Any] = {
        "run_stem": "run_0001_20260101_000000",
        "status": "completed",
        "reason": "",
        "dry_run": False,
        "duration_s": 12.0,
        "task": "pick_place",
        "succeeded": True,
        "verdicts": "pick yes place yes",
        "moves": 9,
        "recording": RecordingInfo(),
        "run_dir": Path("/nowhere"),
        "trace_path": Path("/nowhere/trace.jsonl"),
        "scene_seed": 9100,
    }
    outcome = {"pick_verdict": "yes", "pick_confidence": 0.9, "place_verdict": "yes",
               "place_confidence": 0.9, "pick_attempts": 1}  # fmt: skip
    for key in list(kw):
        if key in outcome:
            outcome[key] = kw.pop(key)
    if "block_held" in kw:
        kw["held"] = kw.pop("block_held")
    return TrialSummary(**{**base, "outcome": outcome, **kw})


def _cap(kind: str, claim: Any, truth: dict[str, Any] | None) -> sc.Capture:
    return sc.Capture(kind, claim, seen_ts=0.0, truth=truth)


def test_a_row_of_a_wrong_refusal_then_a_block_held_at_the_stop() -> None:
    held = _truth(_block(-0.2, 0.2))
    t = _summary(
        status="stopped",
        reason="release refused: not seen above the box",
        place_verdict="",
        block_held=True,
    )
    caps = [_cap("pick_verdict", "yes", held), _cap("release_check", False, held)]
    row = sc.success_row(3, 2, t, caps, _end("gripper", grasped=True))
    assert (row.trial, row.session, row.seed) == (3, 2, 9100)
    assert row.release_checks == 1 and row.release_confirmed == 0
    assert row.wrong_refusals == 1 and row.right_refusals == 0 and row.wrong_confirms == 0
    assert row.release_would_land is True and row.release_margin_mm is not None
    assert row.pick_true_grasped is True and row.pick_wrong is False
    assert row.true_block_on == "gripper" and row.true_grasped is True
    assert row.placed_true is False and row.false_held is False and row.false_placed is False
    assert row.place_verdict == "-" and row.block_held
    assert row.release_landed is None  # refused: no release to bear it out
    d = row.csv_dict()
    assert list(d) == sc.CSV_COLUMNS and "captures" not in d
    assert "wrong_refusal" in sc.row_line(row)


def test_a_check_not_confirmed_then_re_aimed_is_no_refusal() -> None:
    """Only the trial's last word is a refusal: a check followed by a re-aim and a
    confirmed release is counted apart (``reaimed_would_land``)."""
    held = _truth(_block(-0.2, 0.2))
    caps = [_cap("release_check", False, held), _cap("release_check", True, held)]
    row = sc.success_row(1, 1, _summary(), caps, _end("box"))
    assert row.wrong_refusals == 0 and row.right_refusals == 0
    assert row.reaimed_would_land == 1 and row.release_confirmed == 1


def test_a_row_of_a_placed_verdict_the_world_does_not_share() -> None:
    missed = _truth(_block(0.2, 0.25, on="mat"), grasped=False)
    caps = [_cap("pick_verdict", "yes", missed), _cap("release_check", True, missed)]
    row = sc.success_row(1, 1, _summary(), caps, _end("mat"))
    assert row.pick_wrong is True and row.wrong_confirms == 1 and row.false_placed is True
    assert row.release_would_land is False and row.release_landed is False
    sm = sc.summary([row], 1, [{"session": 1, "trials": 1, "stopped_by": ""}])
    assert sm["would_land_not_borne_out"] == 0
    assert sm["false_placed"] == 1 and sm["placed_true"] == 0 and sm["wrong_confirms"] == 1
    assert sm["pick_verdict_equals_truth"] == {"trials": 1, "equal": 0}
    assert sm["place_verdict_equals_truth"] == {"trials": 1, "equal": 0}
    assert sm["not_placed"] == {"completed, pick yes place yes": 1}
    assert "false placed:          1" in sc.summary_text(
        sm, [{"session": 1, "trials": 1, "stopped_by": ""}]
    )


def test_a_confirmed_check_whose_block_landed_although_the_footprint_said_no() -> None:
    """MuJoCo's tilted block can fall into the box from a footprint just over the wall: the
    row says so, beside the wrong confirm."""
    over = _truth(_block(-0.2, 0.2226))  # 0.1 mm over the wall
    caps = [_cap("pick_verdict", "yes", over), _cap("release_check", True, over)]
    row = sc.success_row(1, 1, _summary(), caps, _end("box"))
    assert row.wrong_confirms == 1 and row.release_landed is True and row.placed_true
    sm = sc.summary([row], 1, [{"session": 1, "trials": 1, "stopped_by": ""}])
    assert sm["would_land_not_borne_out"] == 1


def test_the_summary_splits_the_first_ten_trials_from_the_rest() -> None:
    rows = [
        sc.success_row(k, 1, _summary(), [], _end("box" if k % 2 else "mat")) for k in range(1, 15)
    ]
    sm = sc.summary(rows, 14, [{"session": 1, "trials": 14, "stopped_by": ""}])
    assert sm["placed_true"] == 7
    assert sm["placed_true_first"] == {"trials": 10, "placed": 5}
    assert sm["placed_true_rest"] == {"trials": 4, "placed": 2}
    assert sm["mean_trial_s"] == pytest.approx(12.0)
    json.dumps(sm)


# ---------------------------------------------------------------- the truth tap
@pytest.fixture
def truth_server() -> Iterator[tuple[str, list[str]]]:
    """A stand-in for the workcell's ``GET /scene/truth``; the paths it was asked for."""
    asked: list[str] = []
    body = json.dumps(_truth(_block(-0.2, 0.2))).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_a: Any) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", asked
    srv.shutdown()
    srv.server_close()
    th.join(5)


def test_the_tap_takes_the_truth_at_the_two_moments_only(
    truth_server: tuple[str, list[str]],
) -> None:
    url, asked = truth_server
    out = io.StringIO()
    tap = sc.TruthTap(url)
    con = tap.attach(RuntimeConsole(out, live=False))
    con.trial_start(1)
    con.on_trace(
        {"event": "decision", "kind": "command", "value": {"note": "x", "angles": [0] * 6}}
    )
    con.on_trace({"event": "input", "kind": "pick_verdict", "value": {"verdict": "yes"}, "ts": 1.0})
    con.on_trace({"event": "decision", "kind": "release_check", "value": {"confirmed": False}})
    con.on_trace({"event": "decision", "kind": "release_check", "value": "garbled"})
    tap.drain()
    caps = tap.of(1)
    assert [(c.kind, c.claim) for c in caps] == [("pick_verdict", "yes"), ("release_check", False)]
    assert all(c.truth is not None and c.truth["grasped"] for c in caps)
    assert asked == ["/scene/truth", "/scene/truth"]
    # the console still heard everything
    assert "trial 1:" in out.getvalue() and "move x" in out.getvalue()
    # the next trial's captures are its own; a trial started again starts empty
    con.trial_start(2)
    assert tap.of(2) == [] and len(tap.of(1)) == 2
    summary = _summary()
    con.trial_end(summary, "a line")
    assert tap.summaries == {2: summary}


def test_the_tap_records_a_truth_it_could_not_fetch() -> None:
    tap = sc.TruthTap("http://127.0.0.1:9", timeout=1.0)
    tap.begin(1)
    tap.see({"event": "decision", "kind": "release_check", "value": {"confirmed": True}})
    tap.drain()
    (cap,) = tap.of(1)
    assert cap.truth is None and cap.error
    row = sc.success_row(1, 1, _summary(), [cap], None)
    assert row.failed_captures == 1 and row.release_would_land is None
    assert row.placed_true is None and row.true_block_on == "-"


# ---------------------------------------------------------------- arguments
@pytest.mark.parametrize(
    "argv",
    [
        ["--profile", "rgi"],
        ["--trials", "0"],
        ["--trials", "many"],
        ["--time-scale", "-1"],
        ["--time-scale", "nan"],
        ["--seed", "1.5"],
        ["--no-such-flag"],
    ],
)
def test_bad_arguments_are_usage_errors_before_anything_starts(
    argv: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    root = tmp_path / "root"
    with pytest.raises(SystemExit) as exc:
        sc.main([*argv, "--root", str(root)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "usage:" in err and "Traceback" not in err
    assert not root.exists()


def test_a_root_that_is_a_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(SystemExit) as exc:
        sc.main(["--root", str(f)])
    assert exc.value.code == 2
    assert "not a directory" in capsys.readouterr().err


# ---------------------------------------------------------------- sessions
class _FakeChild:
    def alive(self) -> bool:
        return True

    def stop(self) -> None:
        pass


def _fake_sessions(
    monkeypatch: pytest.MonkeyPatch, stops_after: dict[int, tuple[int, str]]
) -> list[tuple[int, int, int]]:
    """The rig stood in for; session k runs ``stops_after[k][0]`` trials then stops for
    ``stops_after[k][1]`` (all its trials when absent). Returns (session, first trial,
    trials asked) per session run."""
    calls: list[tuple[int, int, int]] = []

    class _Rig:
        children: ClassVar[list[_FakeChild]] = [_FakeChild()]
        control_url = "http://127.0.0.1:9"

        def stop(self) -> None:
            pass

    def run_one(_rig: Any, sess: Any, trials: int, seed: int, on_end: Any) -> None:
        calls.append((sess.number, sess.first_trial, trials))
        n, why = stops_after.get(sess.number, (trials, ""))
        for j in range(n):
            held = bool(why) and j == n - 1
            t = _summary(scene_seed=seed + sess.first_trial + j, block_held=held)
            sess.report.trials.append(t)
            sess.ends[j] = _end("gripper", grasped=True) if held else _end("box")
            on_end(sess, j, t, [])
        sess.report.stopped_by = why

    monkeypatch.setattr(sc, "start_demo_rig", lambda *_a, **_k: _Rig())
    monkeypatch.setattr(sc, "_run_one", run_one)
    return calls


HELD = "block held in the gripper (take it out by hand)"


def test_a_session_that_stops_early_is_followed_by_another(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = _fake_sessions(monkeypatch, {1: (2, HELD)})
    assert sc.main(["--trials", "5", "--seed", "40", "--root", str(tmp_path)]) == 0
    assert calls == [(1, 0, 5), (2, 2, 3)]
    doc = json.loads((tmp_path / "successcheck.json").read_text(encoding="utf-8"))
    assert doc["sessions"] == [
        {"session": 1, "trials": 2, "stopped_by": HELD},
        {"session": 2, "trials": 3, "stopped_by": ""},
    ]
    assert [t["seed"] for t in doc["trials"]] == [40, 41, 42, 43, 44]
    assert [t["session"] for t in doc["trials"]] == [1, 1, 2, 2, 2]
    assert doc["summary"]["sessions"] == 2 and doc["summary"]["placed_true"] == 4
    out = capsys.readouterr().out
    assert f"session 1: 2 trial(s), stopped by: {HELD}" in out
    assert "session 2: continuing at trial 3 (seed 42)" in out


def test_one_session_reports_the_early_stop_and_does_not_continue(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = _fake_sessions(monkeypatch, {1: (2, HELD)})
    assert sc.main(["--trials", "5", "--root", str(tmp_path), "--one-session"]) == 0
    assert calls == [(1, 0, 5)]
    out = capsys.readouterr().out
    assert "stopped early after 2 of 5 trials; not continued (--one-session)" in out
    rows = list(csv.DictReader((tmp_path / "successcheck.csv").read_text("utf-8").splitlines()))
    assert len(rows) == 2 and rows[1]["block_held"] == "True" and rows[1]["false_held"] == "False"


def test_a_session_that_ran_no_trial_ends_the_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = _fake_sessions(monkeypatch, {1: (0, "daemon unavailable: gone")})
    assert (
        sc.main(["--trials", "3", "--root", str(tmp_path / "r"), "--out", str(tmp_path / "o")]) == 1
    )
    assert calls == [(1, 0, 3)]
    assert "not continued (it ran no trial)" in capsys.readouterr().out
    assert (tmp_path / "o" / "successcheck.csv").is_file()


# ---------------------------------------------------------------- the real thing
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_trial_of_the_demos_path_against_the_truth(
    tmp_path: Path, fk_data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One trial through the demo's processes with the truth taken beside it (a second trial
    cost 10 s of the suite's CPU; the demo's own trials run in pairs in the shared demo root,
    and the rows, sessions and summary are checked on hand-made truths above)."""
    root = tmp_path / "root"
    root.mkdir()
    shutil.copytree(fk_data_dir / FK_DIR, root / FK_DIR)  # the FK table, built once per suite
    code = sc.main(
        ["--profile", "ideal", "--trials", "1", "--time-scale", "10", "--root", str(root)]
    )
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    rows = list(csv.DictReader((root / "successcheck.csv").read_text("utf-8").splitlines()))
    assert [r["trial"] for r in rows] == ["1"]
    for r in rows:
        assert r["seed"] == "9100" and r["session"] == "1"
        # the truth columns are filled: the end state and the moments' snapshots
        assert r["true_block_on"] in ("box", "rim", "mat", "gripper", "air"), r
        assert r["placed_true"] in ("True", "False") and r["true_grasped"] in ("True", "False")
        assert r["pick_judgements"] != "0" and r["pick_true_grasped"] in ("True", "False")
        if r["release_checks"] != "0":
            assert r["release_margin_mm"] != "" and r["release_would_land"] in ("True", "False")
        assert r["failed_captures"] == "0"
    doc = json.loads((root / "successcheck.json").read_text(encoding="utf-8"))
    sm = doc["summary"]
    assert sm["trials_run"] == 1 and sm["sessions"] == 1
    assert doc["sessions"][0]["trials"] == 1
    assert len(doc["trials"]) == 1 and doc["trials"][0]["captures"]
    assert "placed (truth):" in out and "sessions needed:       1" in out


def test_the_jaws_events_say_why_each_pick_held_slipped_or_missed() -> None:
    end = _end("mat")
    end["events"] = [
        {"kind": "miss", "ts": 1.0, "axis_mm": 3.1, "across_mm": -9.0,
         "reason": "grasped by an edge (pads overlap the block 5.2 mm < 7 mm): it slipped out"},
        {"kind": "placed", "ts": 1.5},
        {"kind": "grasp", "ts": 2.0, "axis_mm": 1.0, "across_mm": 2.0, "lever_mm": 7.4},
        {"kind": "slip", "ts": 2.1, "reason": "off-centre grasp: ..."},
    ]  # fmt: skip
    assert sc.jaw_events(end) == (
        "miss(axis_mm=3.1 across_mm=-9.0 why=grasped by an edge)"
        "|grasp(lever_mm=7.4 axis_mm=1.0 across_mm=2.0)|slip()"
    )
    assert sc.jaw_events(None) == ""
    row = sc.success_row(1, 1, _summary(), [], end)
    assert row.csv_dict()["jaw_events"].startswith("miss(")
