"""The pick servo (docs/stages.md, "The pick servo") and learning from a measured miss.

The machine tests run the real daemon and SimArm with a camera stand-in whose world
arm is off by joint zero offsets (the tip the camera sees and the grasp are where the
offset arm puts it); the end-to-end tests run the simulated rig as a process with a
sim profile whose arm has those offsets, and with the ideal profile.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mecharm.common.kinematics import fk_tip
from mecharm.common.layout import DataRoot
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.memories import CorrectionMemory
from mecharm.runtime.pick_place import context, pick
from mecharm.runtime.ports import TipObservation
from mecharm.runtime.records.trace import read_trace
from mecharm.runtime.rigsetup import open_rig
from mecharm.runtime.simcontrol import scene_next
from mecharm.runtime.trial import TrialSummary, run_trial
from mecharm.tools.simrig import start_sim_daemon

from .conftest import SimDaemon
from .conftest import trial_settings as _settings
from .stand_ins import TrueStateEyes

BLOCK = (0.20, 0.26)
BOX = (-0.20, 0.18)
#: j0 3°, j1 and j2 −1°: the tip lands ~16 mm off in x-z (and ~9 mm high) at the pick
OFFSET = (3.0, -1.0, -1.0, 0.0, 0.0, 0.0)
GRASP_MM = 12.0  # the simulated gripper's x-z grasp tolerance (docs/workcell.md)


class OffsetEyes(TrueStateEyes):
    """The camera stand-in of an arm whose joints are off by ``offset``: it sees the tip, and
    the gripper holds the block, where the offset arm really is."""

    def __init__(self, *a: Any, offset: tuple[float, ...] = OFFSET, **kw: Any) -> None:
        super().__init__(*a, grasp_mm=GRASP_MM, **kw)
        self.offset = np.asarray(offset)

    def _tip(self) -> tuple[float, float, float]:
        x, y, z = (float(v) for v in fk_tip(np.asarray(self.arm.true_angles()) + self.offset))
        return x, y, z


async def _trial(d: SimDaemon, root: Path, fk: Path, eyes: Any, **kw: Any) -> TrialSummary:
    s = _settings(root, fk, daemon_port=d.port, **kw)
    # the service's own rig set-up (time scale, envelope, warmed lookups, keepalive)
    async with open_rig(s, eyes=eyes) as (rig, _client):
        return await run_trial(rig)


def _decisions(t: TrialSummary, kind: str) -> list[dict[str, Any]]:
    return [
        e["value"]
        for e in read_trace(t.trace_path)
        if e["event"] == "decision" and e.get("kind") == kind
    ]


def _assert_checked(t: TrialSummary, *near_work: str) -> list[dict[str, Any]]:
    """Every move of the trial had its path checked and passed; every move whose note starts
    with one of ``near_work`` (each present) had the joint-step bound checked against a
    reference pose and kept it. A missing check fails: it is not taken for a pass."""
    checks = _decisions(t, "motion_check")
    assert checks, "no motion_check in the trace: the checks were off"
    for c in checks:
        assert c["path"]["ok"], c
    for prefix in near_work:
        near = [c for c in checks if c["note"].startswith(prefix)]
        assert near, f"no checked move {prefix!r}: {[c['note'] for c in checks]}"
        for c in near:
            step = c["joint_step"]
            assert step["ok"] and "ref" in step and abs(step["jump_deg"]) <= step["bound_deg"], c
    return checks


# ---------------------------------------------------------------- the step rule


def test_servo_step_is_bounded_per_step_and_in_total() -> None:
    s = RuntimeSettings(pick_servo_step_mm=10.0, max_correction_mm=20.0, pick_servo_tol_mm=8.0)
    rng = random.Random(5)
    for _ in range(2000):
        used = (rng.uniform(-20, 20), rng.uniform(-20, 20))
        done = (rng.uniform(-20, 20) - used[0], rng.uniform(-20, 20) - used[1])
        tip = TipObservation(True, rng.uniform(-60, 60), rng.uniform(-60, 60))
        step, why = pick._pick_servo_step(s, tip, used, done)
        if step is None:
            assert why == "within tolerance" or why.startswith("total bound"), why
            continue
        assert math.hypot(*step) <= 10.0 + 1e-9  # per step
        for u, d, k in zip(used, done, step, strict=True):  # in total, counting the memory
            assert abs(u + d + k) <= 20.0 + 1e-9
    within = pick._pick_servo_step(s, TipObservation(True, 5.0, -5.0), (0, 0), (0, 0))
    assert within == (None, "within tolerance")
    unseen = pick._pick_servo_step(
        s, TipObservation(False, reason="tip marker not visible"), (0, 0), (0, 0)
    )
    assert unseen[0] is None and "not measured" in unseen[1]
    # the aim is already 20 mm off in x: an offset further that way gets no step
    at_bound = pick._pick_servo_step(s, TipObservation(True, 15.0, 0.0), (20.0, 0.0), (0, 0))
    assert at_bound[0] is None and at_bound[1].startswith("total bound")


def test_pick_band_after_a_height_miss_and_with_a_calibrated_tip_height() -> None:
    from types import SimpleNamespace

    st = context.TrialState()
    ctx: Any = SimpleNamespace(settings=RuntimeSettings(), state=st)
    assert pick._pick_band(ctx) == (0.010, 0.040)
    st.height_miss = True
    assert pick._pick_band(ctx) == (0.0175, 0.0325)
    # the tip sits 19 mm below the model: rows whose model tip is 19 mm higher
    ctx.settings = RuntimeSettings(pick_tip_height_mm=-19.0)
    assert pick._pick_band(ctx) == pytest.approx((0.0365, 0.0515))
    with pytest.raises(ValueError, match="pick_tip_height_mm"):
        RuntimeSettings(pick_tip_height_mm=80.0)


def test_the_servo_is_on_and_stops_within_a_grasp() -> None:
    s = RuntimeSettings()
    assert s.pick_place.pick_servo_max_iter > 0 and s.pick_place.pick_servo_tol_mm < GRASP_MM


# ---------------------------------------------------------------- on the daemon, offset arm


@pytest.mark.slow
@pytest.mark.anyio
async def test_servo_closes_the_offset_and_memory_learns_it(
    sim_daemon: SimDaemon, tmp_path: Path, fk_data_dir: Path
) -> None:
    eyes = OffsetEyes(sim_daemon.arm, BLOCK, BOX)
    t = await _trial(sim_daemon, tmp_path, fk_data_dir, eyes, max_pick_attempts=1)
    assert t.status == "completed" and t.outcome["pick_attempts"] == 1, t.reason
    steps = _decisions(t, "pick_servo")
    assert (
        steps[0]["action"] == "move"
        and math.hypot(steps[0]["tip_dx_mm"], steps[0]["tip_dz_mm"]) > GRASP_MM
    )
    assert steps[-1]["action"] == "within tolerance"
    (result,) = _decisions(t, "pick_servo_result")
    assert result["converged"] and result["steps"] >= 1
    # the memory holds the arm's offset: the servo's total plus the last measured residual
    (tip,) = [e["value"] for e in read_trace(t.trace_path) if e.get("kind") == "tip"][-1:]
    entry = CorrectionMemory(DataRoot(tmp_path).correction_memory).entries
    (learned,) = entry.values()
    assert learned["dx_mm"] == pytest.approx(result["total_mm"][0] + tip["dx_mm"])
    assert learned["dz_mm"] == pytest.approx(result["total_mm"][1] + tip["dz_mm"])
    assert math.hypot(learned["dx_mm"], learned["dz_mm"]) > GRASP_MM
    # the lift went back up past the servo's poses: every near-work move kept the bound
    _assert_checked(t, "pick servo", "pick descend")


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_retry_after_servo_steps_goes_down_and_up_the_servo_s_way(
    sim_daemon: SimDaemon, tmp_path: Path, fk_data_dir: Path
) -> None:
    # the first pick is judged no (scripted) after the servo moved: the retry lowers to the
    # servoed pose and comes up again through the poses the servo went, each within the bound
    eyes = OffsetEyes(sim_daemon.arm, BLOCK, BOX, fail_picks=1)
    t = await _trial(sim_daemon, tmp_path, fk_data_dir, eyes)
    assert t.status == "completed" and t.outcome["pick_attempts"] == 2, t.reason
    notes = [c["note"] for c in _decisions(t, "command")]
    assert any(n.startswith("pick servo") for n in notes)
    assert any(n.startswith("retry: lower to the mat") for n in notes)
    assert any(n.startswith("retry: up from the mat") for n in notes)
    _assert_checked(t, "pick servo", "retry: lower to the mat", "retry: up from the mat")


class FaultingEyes(OffsetEyes):
    """The offset arm's camera; when it measures the tip as ``tag`` it arms ``fault`` on the sim
    arm's firmware (as ``POST /faults`` does) for the next move: a servo step that never arrives."""

    def __init__(self, *a: Any, after: str, fault: Callable[[Any], None], **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.after, self.fault = after, fault

    async def measure_tip(
        self, block_xz: tuple[float, float], tip_height_m: float, tag: str
    ) -> TipObservation:
        obs = await super().measure_tip(block_xz, tip_height_m, tag)
        if tag == self.after:
            self.fault(self.arm.faults)
        return obs


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize(
    ("after", "fault"),
    [
        # the first servo step stops for good halfway
        ("descend_pick_tip", lambda f: f.stall_next_move(0.5)),
        # the second one is ignored by the firmware, and so is its one re-send
        ("descend_pick_servo1", lambda f: f.ignore_next_sends(2)),
    ],
    ids=["stall_first_step", "ignored_second_step"],
)
async def test_abort_after_a_servo_step_that_did_not_arrive_goes_up_within_the_bound(
    sim_daemon: SimDaemon,
    tmp_path: Path,
    fk_data_dir: Path,
    after: str,
    fault: Callable[[Any], None],
) -> None:
    # the last commanded pose is unknown, the arm is low at the block: the abort's way up is
    # bounded and checked as the lift's is (j0 8°: ~40 mm off, servo steps of 15 mm)
    eyes = FaultingEyes(
        sim_daemon.arm, BLOCK, BOX, offset=(8.0, 0, 0, 0, 0, 0), after=after, fault=fault
    )
    t = await _trial(
        sim_daemon, tmp_path, fk_data_dir, eyes, max_pick_attempts=1, max_correction_mm=40.0,
        tol_pick_place=0.5,  # a servo step turns a joint 1-3°: an ignored one is not "arrived"
    )  # fmt: skip
    assert t.status == "stopped" and t.reason.startswith("descend_pick: pick servo"), t.reason
    assert sum(sim_daemon.arm.faults.counts.values()) >= 1  # the armed fault took effect
    retreat = [c for c in _decisions(t, "motion_check") if c["note"].startswith("abort: retreat")]
    assert retreat, [c["note"] for c in _decisions(t, "motion_check")]
    for c in retreat:  # every move of the way up: joint-step bound and path checked, kept
        step = c["joint_step"]
        assert step["ok"] and abs(step["jump_deg"]) <= step["bound_deg"], c
        assert c["path"]["ok"], c
    assert retreat[0]["joint_step"]["ref_source"] == "measured"  # where the fault left it
    cmds = [c["note"] for c in _decisions(t, "command")]
    way_up = cmds[cmds.index(retreat[0]["note"]) :]
    # after the fault only the way up is commanded: its steps, then home; on a loaded machine
    # a step of it may stall, and the abort then stops there rather than pressing on
    assert all(n.startswith("abort: retreat") or n == "abort: home" for n in way_up), cmds
    assert not any(n.startswith("pick servo") for n in way_up), cmds


@pytest.mark.slow
@pytest.mark.anyio
async def test_servo_stops_at_its_total_bound_without_an_unsafe_pose(
    sim_daemon: SimDaemon, tmp_path: Path, fk_data_dir: Path
) -> None:
    # j0 8°: ~35 mm off in x-z, beyond max_correction_mm 20; one attempt only
    eyes = OffsetEyes(sim_daemon.arm, BLOCK, BOX, offset=(8.0, 0, 0, 0, 0, 0))
    t = await _trial(
        sim_daemon, tmp_path, fk_data_dir, eyes, max_pick_attempts=1, pick_servo_max_iter=6
    )
    assert t.status == "stopped" and "judged no after 1 attempts" in t.reason
    steps = _decisions(t, "pick_servo")
    moved = [s for s in steps if s["action"] == "move"]
    assert moved and steps[-1]["action"].startswith("total bound"), steps[-1]
    for s in moved:  # never aimed farther than max_correction_mm from the block, per axis
        assert all(abs(v) <= 20.0 + 1e-9 for v in s["total_mm"])
        aim = s["aim_xz"]
        assert abs(aim[0] - BLOCK[0]) <= 0.020 + 1e-9 and abs(aim[1] - BLOCK[1]) <= 0.020 + 1e-9
    s0 = RuntimeSettings()
    cmds = [c for c in _decisions(t, "command") if c["note"].startswith("pick servo")]
    assert len(cmds) == len(moved)
    for c in cmds:  # each servo pose is a pick-band row, passed by guard and motion checks
        assert (
            s0.pick_place.pick_band[0] <= float(fk_tip(c["angles"])[1]) < s0.pick_place.pick_band[1]
        )
    guards = [g for g in _decisions(t, "guard") if g["note"].startswith("pick servo")]
    assert len(guards) == len(cmds) and all(g["ok"] for g in guards)
    (result,) = _decisions(t, "pick_servo_result")
    assert not result["converged"] and result["why"].startswith("total bound")


def _refuse_servo_lookups(monkeypatch: pytest.MonkeyPatch) -> None:
    """The servo's own lookups find no row (far out of reach: out_of_range); the descents
    plan in lookup/descent.py and are not touched."""
    real = pick.fk_lookup

    def refusing(table: Any, phase: str, target: Any, *a: Any, **kw: Any) -> Any:
        if phase == "pick":
            return real(table, phase, (5.0, 5.0), *a, **kw)
        return real(table, phase, target, *a, **kw)

    monkeypatch.setattr(pick, "fk_lookup", refusing)


def _refuse_servo_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """No servo step at all: no row (above) and no step solved from the pose either, as for
    a block at the very edge of reach; the servo ends where the descent put the tip."""
    _refuse_servo_lookups(monkeypatch)
    monkeypatch.setattr(
        pick, "_fine_step", lambda *a, **kw: (None, "fine", "no step from the pose either")
    )


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_servo_that_cannot_close_the_offset_descends_again_at_the_measured_aim(
    sim_daemon: SimDaemon, tmp_path: Path, fk_data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The servo stops ~16 mm off (no step it may make): instead of closing the jaws there
    (a miss that pushes the block), the arm goes up the way it came, descends again at the
    aim moved by the measured offset, every move through every check, and the pick holds."""
    _refuse_servo_steps(monkeypatch)
    eyes = OffsetEyes(sim_daemon.arm, BLOCK, BOX)
    t = await _trial(sim_daemon, tmp_path, fk_data_dir, eyes, max_pick_attempts=1)
    assert t.status == "completed" and t.outcome["pick_verdict"] == "yes", t.reason
    (redescent,) = _decisions(t, "pick_redescend")
    assert (
        redescent["used"] and redescent["tip_mm"] > RuntimeSettings().pick_place.pick_redescend_mm
    )
    # one bounded servo step: the aim moved by at most pick_servo_step_mm
    assert (
        math.hypot(*redescent["step_mm"]) <= RuntimeSettings().pick_place.pick_servo_step_mm + 1e-9
    )
    notes = [c["note"] for c in _decisions(t, "command")]
    i, j = notes.index("pick descend"), notes.index("pick descend again")
    assert notes[i + 1].startswith("re-descend: up from the block") and i < j
    assert notes[notes.index("pick descend again") + 1] == "lift", notes  # grasped there
    tips = [e["value"] for e in read_trace(t.trace_path) if e.get("kind") == "tip"]
    assert tips[0]["dist_mm"] > GRASP_MM > tips[-1]["dist_mm"], tips
    checks = _assert_checked(t, "pick descend", "re-descend: up from the block")
    again = [c for c in checks if c["note"] == "pick descend again"]
    assert again and all(c["path"]["ok"] for c in again)
    guards = _decisions(t, "guard")
    assert all(g["ok"] for g in guards), [g for g in guards if not g["ok"]]
    s = RuntimeSettings()
    pose = next(c for c in _decisions(t, "command") if c["note"] == "pick descend again")
    assert s.pick_place.pick_band[0] <= float(fk_tip(pose["angles"])[1]) < s.pick_place.pick_band[1]
    assert pose["angles"][1] <= s.arm.j1_max


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_re_descent_no_pose_reaches_goes_back_down_and_grasps_as_before(
    sim_daemon: SimDaemon, tmp_path: Path, fk_data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _refuse_servo_steps(monkeypatch)
    real = pick.plan_pick_descent
    calls = []

    def second_refused(table: Any, aim: Any, *a: Any, **kw: Any) -> Any:
        calls.append(aim)
        return real(table, aim if len(calls) == 1 else (5.0, 5.0), *a, **kw)

    monkeypatch.setattr(pick, "plan_pick_descent", second_refused)
    eyes = OffsetEyes(sim_daemon.arm, BLOCK, BOX)
    t = await _trial(sim_daemon, tmp_path, fk_data_dir, eyes, max_pick_attempts=1)
    assert len(calls) == 2
    (refused,) = _decisions(t, "pick_redescend_refused")
    assert "out_of_range" in refused["reason"]
    notes = [c["note"] for c in _decisions(t, "command")]
    k = notes.index("re-descend: up from the block")
    # back down to the first descent's pose, then the grasp there and the lift
    assert notes[k + 1].startswith("re-descend refused"), notes
    assert notes[k + 2] == "lift", notes
    down = next(c for c in _decisions(t, "command") if c["note"].startswith("re-descend refused"))
    first = next(c for c in _decisions(t, "command") if c["note"] == "pick descend")
    assert down["angles"] == first["angles"]
    _assert_checked(t, "pick descend", "re-descend")
    assert t.status == "stopped" and "judged no" in t.reason  # 16 mm off: the grasp missed


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_step_the_table_has_no_row_for_is_solved_from_the_pose_within_the_bound(
    sim_daemon: SimDaemon, tmp_path: Path, fk_data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the edge of reach the table has no row within dist_max: the step is solved with the
    FK model from the arm's pose, every joint within the bound,
    through every guard, and the pick holds."""
    _refuse_servo_lookups(monkeypatch)
    eyes = OffsetEyes(sim_daemon.arm, BLOCK, BOX)
    t = await _trial(sim_daemon, tmp_path, fk_data_dir, eyes, max_pick_attempts=1)
    steps = _decisions(t, "pick_servo")
    moved = [d for d in steps if d["action"] == "move"]
    assert moved and all(d["how"] == "fine" and "out_of_range" in d["lookup"] for d in moved)
    s = RuntimeSettings()
    commands = [c for c in _decisions(t, "command") if c["note"].startswith("pick servo")]
    assert len(commands) == len(moved)
    prev = next(c for c in _decisions(t, "command") if c["note"] == "pick descend")["angles"]
    for c in commands:
        assert max(abs(a - b) for a, b in zip(c["angles"], prev, strict=True)) <= (
            s.arm.joint_step_max_deg + 1e-6
        )
        assert c["angles"][1] <= s.arm.j1_max
        prev = c["angles"]
    assert t.outcome["pick_verdict"] == "yes", t.reason


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_measured_miss_teaches_the_memory_and_the_retry_holds(
    sim_daemon: SimDaemon, tmp_path: Path, fk_data_dir: Path
) -> None:
    # no servo: the first pick misses by ~16 mm; learning from the measured miss aims the retry
    eyes = OffsetEyes(sim_daemon.arm, BLOCK, BOX)
    t = await _trial(
        sim_daemon, tmp_path, fk_data_dir, eyes, pick_servo_max_iter=0, max_pick_attempts=2
    )
    assert t.status == "completed" and t.outcome["pick_attempts"] == 2, t.reason
    first, *_ = _decisions(t, "correction_update")
    assert first["updated"] and math.hypot(first["dx_mm"], first["dz_mm"]) > GRASP_MM
    assert _decisions(t, "pick_servo") == []


# ---------------------------------------------------------------- end to end, sim profiles


def _e2e(
    root: Path, fk: Path, logs: Path, seed: int, profile: str | None
) -> tuple[TrialSummary, dict[str, Any]]:
    from mecharm.common.config import load_settings

    extra = ["--sim-profile", profile] if profile else []
    rig = start_sim_daemon(logs, seed=seed, time_scale=20.0, extra_args=extra)
    try:
        scene_next(rig.control_url, seed)
        s = load_settings(
            RuntimeSettings,
            overrides={
                "data_root": root, "fk_data_dir": fk, "daemon_port": rig.daemon_port,
                "top_camera": rig.top_url, "recorder_enabled": False, "time_scale": 20.0,
            },
        )  # fmt: skip

        async def one() -> TrialSummary:
            async with open_rig(s) as (r, _client):
                return await run_trial(r, scene_seed=seed)

        t = asyncio.run(one())
        with urllib.request.urlopen(rig.control_url + "/scene/truth", timeout=5) as resp:
            truth = json.loads(resp.read())
    finally:
        rig.daemon.stop()
    return t, truth


@pytest.mark.slow
def test_e2e_offset_profile_first_pick_holds_after_servo_steps(
    tmp_path: Path, fk_data_dir: Path
) -> None:
    prof = tmp_path / "offset.yaml"
    prof.write_text(f"base: ideal\narm:\n  zero_offset_deg: {list(OFFSET)}\n")
    root = tmp_path / "root"
    root.mkdir()
    t, truth = _e2e(root, fk_data_dir, tmp_path / "logs", 100, str(prof))
    assert t.status == "completed" and t.outcome["pick_attempts"] == 1, t.reason
    moved = [s for s in _decisions(t, "pick_servo") if s["action"] == "move"]
    first_tip = moved[0]
    assert math.hypot(first_tip["tip_dx_mm"], first_tip["tip_dz_mm"]) > GRASP_MM
    (result,) = _decisions(t, "pick_servo_result")
    assert result["converged"]
    grasps = [e for e in truth["events"] if e["kind"] in ("grasp", "miss")]
    assert grasps[0]["kind"] == "grasp" and grasps[0]["dxz_mm"] < GRASP_MM


@pytest.mark.slow
def test_e2e_ideal_profile_makes_no_servo_step(tmp_path: Path, fk_data_dir: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    t, _truth = _e2e(root, fk_data_dir, tmp_path / "logs", 7, None)
    assert t.status == "completed", t.reason
    steps = _decisions(t, "pick_servo")
    assert steps and all(s["action"] == "within tolerance" for s in steps)
    assert not [c for c in _decisions(t, "command") if c["note"].startswith("pick servo")]


# ---------------------------------------------------------------- the measuring tool


def test_learncheck_refuses_bad_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mecharm_dev import learncheck

    assert learncheck.main(["--trials", "5", "--warmup", "5"]) == 2
    assert "--warmup" in capsys.readouterr().err
    root = tmp_path / "root"
    root.mkdir()
    bad = ["--data-root", str(root), "--zero-offset-deg", "1,2,3", "--trials", "2", "--warmup", "1"]
    assert learncheck.main(bad) == 2
    assert "six numbers" in capsys.readouterr().err
    assert learncheck.main(["--data-root", str(root), "--set", "no_such_key=1"]) == 2
    assert "no_such_key" in capsys.readouterr().err
    mem = DataRoot(root).correction_memory
    mem.parent.mkdir(parents=True)
    mem.write_text('{"version": 1, "entries": {}}')
    assert learncheck.main(["--data-root", str(root), "--trials", "2", "--warmup", "1"]) == 2
    assert "empty memory" in capsys.readouterr().err
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    assert learncheck.main(["--data-root", str(a_file), "--trials", "2", "--warmup", "1"]) == 2
    assert "cannot use it as a directory" in capsys.readouterr().err


@pytest.mark.slow
def test_learncheck_runs_trials_from_an_empty_memory(tmp_path: Path, fk_data_dir: Path) -> None:
    import csv

    import cv2

    from mecharm_dev import learncheck

    root, plot = tmp_path / "root", tmp_path / "curve.png"
    rc = learncheck.main(
        [
            "--profile", "ideal", "--zero-offset-deg", ",".join(str(v) for v in OFFSET),
            "--trials", "2", "--warmup", "1", "--seed", "100", "--time-scale", "20",
            "--data-root", str(root), "--fk-data-dir", str(fk_data_dir), "--plot", str(plot),
        ]
    )  # fmt: skip
    assert rc == 0
    rows = list(csv.DictReader((root / "learncheck.csv").read_text().splitlines()))
    assert [r["seed"] for r in rows] == ["100", "101"]
    # trial 1 starts from the empty memory ~16 mm off; the servo moves before the grasp
    assert float(rows[0]["true_xz_mm"]) > GRASP_MM and int(rows[0]["servo_steps_first"]) >= 1
    assert rows[0]["correction_dx_mm"] == "0.0" and rows[0]["status"] == "completed"
    img = cv2.imread(str(plot))
    assert img is not None and img.shape[0] > 100
    summary = json.loads((root / "learncheck.json").read_text())
    assert summary["trials"] == 2 and summary["trials_after"] == 1
