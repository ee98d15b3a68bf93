"""Never release blind, a safe pick retry, the held block on abort (docs/stages.md, "release").

Machine-level tests run the real daemon + SimArm with the camera boundary scripted
(``TrueStateEyes``); the ``*_sim_*`` tests run the simulated workcell's real top camera
through the runtime's real perception, the arm behind the real daemon.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from mecharm.common.kinematics import fk_tip
from mecharm.common.layout import DataRoot
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.lookup import ensure_table, load_arc, load_table
from mecharm.runtime.memories import HeightMemory
from mecharm.runtime.ports import ReleaseView, VerdictObservation
from mecharm.runtime.records.trace import read_trace
from mecharm.runtime.rigsetup import open_rig
from mecharm.runtime.service import run_service
from mecharm.runtime.trial import TrialSummary, run_trial
from mecharm.sim.scene import BLOCK_SIZE_M, BOX_FLOOR_M, random_layout
from mecharm.sim.workcell import Workcell, WorkcellConfig, start_workcell
from mecharm.tools.replay.runner import replay, replay_settings
from mecharm.tools.replay.tracefile import parse_trace, read_lines

from .conftest import SimDaemon
from .conftest import trial_settings as _settings
from .stand_ins import TrueStateEyes

BLOCK = (0.20, 0.26)
BOX = (-0.20, 0.18)


class HiddenAtRelease(TrueStateEyes):
    """The block is not seen in any top frame at the release, and there is no side frame."""

    def __init__(self, *a: Any, answer: str = "no", **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.answer = answer
        self.asked: list[str] = []

    async def view_release(
        self, lift_m: float, box_xz: tuple[float, float], side_frame: str | None, tag: str
    ) -> ReleaseView:
        return ReleaseView(0, 3, side="no_frame", side_reason="no side frame")

    async def ask_release(self, why: str, tag: str) -> VerdictObservation:
        self.asked.append(why)
        if self.answer == "yes":
            return VerdictObservation("yes", 1.0, "operator: release anyway", "human")
        return VerdictObservation("no", 0.0, "not asked (--confirm off)", "none")


async def _trial(d: SimDaemon, root: Path, fk: Path, eyes: Any, **kw: Any) -> TrialSummary:
    """One trial on the service's own rig set-up (the daemon's time scale and envelope, the
    warmed lookups, the keepalive) with this camera boundary."""
    async with open_rig(_settings(root, fk, daemon_port=d.port, **kw), eyes=eyes) as (rig, _c):
        return await run_trial(rig)


async def _replays_identically(t: TrialSummary, fk: Path) -> None:
    """``mecharm replay`` re-drives the trace's decisions from its inputs, refusal included."""
    recorded = parse_trace(t.trace_path, read_lines(t.trace_path))
    s, _notes = replay_settings(recorded)
    res = await replay(
        recorded,
        s,
        load_table(ensure_table(fk)),
        load_arc(s.pick_place.approach_pick_arc),
        load_arc(s.pick_place.approach_place_arc),
    )
    assert res.identical, (res.divergence, res.diff)
    assert (res.status, res.reason) == (t.status, t.reason)


def _decisions(t: TrialSummary, kind: str) -> list[dict[str, Any]]:
    return [e for e in read_trace(t.trace_path) if e["event"] == "decision" and e["kind"] == kind]


def _pose_at_gripper(t: TrialSummary, action: str) -> list[tuple[list[float], dict[str, Any]]]:
    """For each gripper decision of ``action``: the last angle reading before it (the arm's pose)."""
    last: list[float] | None = None
    out: list[tuple[list[float], dict[str, Any]]] = []
    for e in read_trace(t.trace_path):
        if e["event"] == "input" and e["kind"] == "angles" and e["value"]["angles"]:
            last = e["value"]["angles"]
        if e["event"] == "decision" and e["kind"] == "gripper" and e["value"]["action"] == action:
            assert last is not None
            out.append((last, e))
    return out


# ------------------------------------------------------------------ never release blind


@pytest.mark.slow
@pytest.mark.anyio
async def test_hidden_block_at_release_stops_in_the_hover_holding_it(
    sim_daemon: SimDaemon, tmp_path: Path, fk_data_dir: Path
) -> None:
    eyes = HiddenAtRelease(sim_daemon.arm, BLOCK, BOX)
    with capture_logs() as logs:
        t = await _trial(sim_daemon, tmp_path, fk_data_dir, eyes, release_refused="hold")
    assert t.status == "stopped" and t.held
    # the statement follows what the top camera saw at the tip, not the belief alone
    assert t.held_evidence == "seen"
    (look,) = _decisions(t, "held_block_check")
    assert look["value"]["seen"] is True
    assert t.reason == (
        "release refused: block not seen above the box opening (top: not visible near the "
        "box in 3 of 3 frames; side: no frame (no side frame), advisory); not asked (--confirm off)"
    ), t.reason
    tr = list(read_trace(t.trace_path))
    assert tr[-1]["event"] == "result" and tr[-1]["reason"] == t.reason
    (check,) = _decisions(t, "release_check")
    assert check["value"]["confirmed"] is False
    (override,) = _decisions(t, "release_override")
    assert override["value"]["release"] is False
    # the gripper was never opened after the grasp: the only open is the initial one
    assert [g["value"]["action"] for g in _decisions(t, "gripper")] == ["open", "close"]
    # the last move is the hover (the place approach pose), nothing after it: no HOME
    commands = _decisions(t, "command")
    assert commands[-1]["value"]["note"] == "release refused: hover"
    place_approach = next(
        e for e in _decisions(t, "command") if e["value"]["note"] == "approach_place"
    )
    assert commands[-1]["value"]["angles"] == place_approach["value"]["angles"]
    (exit_,) = _decisions(t, "exit")
    assert {"step": "gripper stays closed", "why": "block held; not taken HOME"} in exit_["value"][
        "steps"
    ]
    # the arm is really there, the gripper still closed, fresh mode off
    assert sim_daemon.arm.wait_idle(5)
    here = sim_daemon.arm.true_angles()
    assert max(abs(a - b) for a, b in zip(here, commands[-1]["value"]["angles"], strict=True)) < 3.5
    assert sim_daemon.arm.true_gripper() < 50 and sim_daemon.arm.get_fresh_mode() == 0
    # the operator is told, on the log (console) too
    assert any(e["event"] == "block_held_at_stop" for e in logs)
    assert any(e["event"] == "release_refused" for e in logs)
    await _replays_identically(t, fk_data_dir)


class GoneAtRelease(HiddenAtRelease):
    """The block is not seen at the release nor at the tip afterwards, nor in the box: it
    hangs in the jaws out of sight (the stand-in's arm still holds it)."""

    async def judge_place(self, side_frame: str | None, tag: str) -> VerdictObservation:
        return VerdictObservation("no", 0.9, "no block in the box (stand-in)", "stand_in")

    async def locate_block(
        self, lift_m: float, near_xz: tuple[float, float], tag: str
    ) -> tuple[float, float] | None:
        if tag == "held_check":
            return None
        return await super().locate_block(lift_m, near_xz, tag)


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_block_not_seen_at_the_tip_is_not_announced_as_held(
    sim_daemon: SimDaemon, tmp_path: Path, fk_data_dir: Path
) -> None:
    """The statement follows the top camera's looks at the tip; the motion does not (a look
    can miss a block tilted in the jaws): not found in the box and not seen at the tip, the
    block stays held in the hover, announced as not seen."""
    eyes = GoneAtRelease(sim_daemon.arm, BLOCK, BOX)
    with capture_logs() as logs:
        t = await _trial(sim_daemon, tmp_path, fk_data_dir, eyes, release_refused="hold")
    assert t.status == "stopped" and t.held and t.held_evidence == "not_seen"
    (told,) = [e for e in logs if e["event"] == "block_held_at_stop"]
    assert told["evidence"] == "not_seen"
    # looked at the release, then after the place judge at the swept retreat
    assert [d["stage"] for d in _decisions(t, "held_block_check")] == [
        "release",
        "retreat_and_judge",
    ]
    assert t.outcome["place_verdict"] == "no"  # judged where it might have gone first


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_put_back_of_a_block_seen_nowhere_says_what_was_done(
    sim_daemon: SimDaemon, tmp_path: Path, fk_data_dir: Path
) -> None:
    """Unattended, the same trial goes back to the mat and opens there; the reason says the
    gripper was opened there, not that a block nobody saw was put back."""
    eyes = GoneAtRelease(sim_daemon.arm, BLOCK, BOX)
    t = await _trial(sim_daemon, tmp_path, fk_data_dir, eyes)
    assert t.status == "stopped" and not t.held, t.reason
    assert t.reason.endswith("; the gripper was opened on the mat where the block was picked")
    assert _decisions(t, "put_back")


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_refused_release_puts_the_block_back_where_it_was_picked(
    sim_daemon: SimDaemon, tmp_path: Path, fk_data_dir: Path
) -> None:
    """Unattended (the default ``release_refused: put_back``): the refused block goes back
    the way it came, is opened at the pick pose, and the arm goes HOME; every pose of the
    put-back is one the trial already commanded holding this block (or HOME), each through
    the guards, so it cannot reach a pose the trial did not already prove safe."""
    eyes = HiddenAtRelease(sim_daemon.arm, BLOCK, BOX)
    with capture_logs() as logs:
        t = await _trial(sim_daemon, tmp_path, fk_data_dir, eyes)
    assert t.status == "stopped" and not t.held, t.reason
    assert t.reason.endswith("; the block was put back on the mat"), t.reason
    (put,) = _decisions(t, "put_back")
    assert put["value"]["why"].startswith("block not seen above the box opening")
    commands = _decisions(t, "command")
    notes = [c["value"]["note"] for c in commands]
    first = notes.index("put back: over the mat")
    before = {tuple(c["value"]["angles"]) for c in commands[:first]}
    for c in commands[first:]:
        if c["value"]["note"] != "put back: home":
            assert tuple(c["value"]["angles"]) in before, c["value"]
    assert notes[-1] == "put back: home"
    # opened at the pick pose (where the block was grasped), not over the box or in the air
    opens = _pose_at_gripper(t, "open")
    pose, e = opens[-1]
    assert e["value"]["note"] == "put back on the mat"
    (pick,) = [c for c in commands if c["value"]["note"] == "pick descend"][:1]
    assert max(abs(a - b) for a, b in zip(pose, pick["value"]["angles"], strict=True)) <= 3.5
    assert sim_daemon.arm.wait_idle(5)
    assert sim_daemon.arm.true_gripper() > 50 and sim_daemon.arm.get_fresh_mode() == 0
    assert any(e["event"] == "block_put_back" for e in logs)
    assert not any(e["event"] == "block_held_at_stop" for e in logs)
    await _replays_identically(t, fk_data_dir)


@pytest.mark.slow
@pytest.mark.anyio
async def test_operator_release_anyway_goes_back_down_then_opens(
    sim_daemon: SimDaemon, tmp_path: Path, fk_data_dir: Path
) -> None:
    eyes = HiddenAtRelease(sim_daemon.arm, BLOCK, BOX, answer="yes")
    t = await _trial(sim_daemon, tmp_path, fk_data_dir, eyes, height_step_mm=5.0)
    assert t.status == "completed", t.reason
    assert len(eyes.asked) == 1 and "not visible near the box in 3 of 3 frames" in eyes.asked[0]
    notes = [c["value"]["note"] for c in _decisions(t, "command")]
    i = notes.index("release refused: hover")
    assert notes[i + 1] == "release anyway: back down"
    # a release the check did not confirm teaches the height memory nothing
    (up,) = _decisions(t, "height_update")
    assert up["value"]["change"] == "keep" and up["value"]["dist_mm"] is None


@pytest.mark.slow
@pytest.mark.anyio
async def test_abort_while_holding_hovers_instead_of_going_home(
    sim_daemon: SimDaemon, tmp_path: Path, fk_data_dir: Path
) -> None:
    # a box out of reach: the place lookup fails with the block in the gripper
    eyes = TrueStateEyes(sim_daemon.arm, BLOCK, (-0.33, 0.40))
    t = await _trial(sim_daemon, tmp_path, fk_data_dir, eyes)
    assert t.status == "stopped" and "lookup out_of_range" in t.reason, t.reason
    assert t.held
    notes = [c["value"]["note"] for c in _decisions(t, "command")]
    assert "abort: home" not in notes and notes[-1] == "abort: hover"
    assert [g["value"]["action"] for g in _decisions(t, "gripper")] == ["open", "close"]
    assert sim_daemon.arm.get_fresh_mode() == 0


@pytest.mark.slow
@pytest.mark.anyio
async def test_with_the_release_check_off_the_release_goes_unchecked(
    sim_daemon: SimDaemon, tmp_path: Path, fk_data_dir: Path
) -> None:
    eyes = HiddenAtRelease(sim_daemon.arm, BLOCK, BOX)
    t = await _trial(sim_daemon, tmp_path, fk_data_dir, eyes, release_check=False)
    assert t.status == "completed" and not _decisions(t, "release_check")


# ------------------------------------------------------------------ height memory


@pytest.mark.slow
@pytest.mark.anyio
async def test_measured_place_raises_the_height_and_logs_the_distance(
    sim_daemon: SimDaemon, tmp_path: Path, fk_data_dir: Path
) -> None:
    eyes = TrueStateEyes(sim_daemon.arm, BLOCK, BOX)
    with capture_logs() as logs:
        t = await _trial(sim_daemon, tmp_path, fk_data_dir, eyes)
    assert t.status == "completed", t.reason
    (check,) = _decisions(t, "release_check")
    assert check["value"]["confirmed"] is True
    (up,) = _decisions(t, "height_update")
    v = up["value"]
    # an empty memory starts at height_start_mm (15), the good place raises it one step
    assert (
        v["placed_ok"] and v["change"] == "raise" and (v["old_mm"], v["dee_y_mm"]) == (15.0, 20.0)
    )
    assert v["margin_mm"] >= 10.0 and v["dist_mm"] is not None
    line = next(e for e in logs if e["event"] == "height_update")
    assert line["line"].startswith(f"update {v['key']} dist={v['dist_mm']:.1f}mm placed=yes")
    assert line["line"].endswith("→ dee_y=20.0mm (n=1)")
    mem = HeightMemory(DataRoot(tmp_path).height_memory)
    assert mem.entries[v["key"]] == {"dee_y_mm": 20.0, "n": 1}


# ------------------------------------------------------------------ safe pick retry


@pytest.mark.slow
@pytest.mark.anyio
async def test_pick_retry_opens_only_at_the_mat(
    sim_daemon: SimDaemon, tmp_path: Path, fk_data_dir: Path
) -> None:
    eyes = TrueStateEyes(sim_daemon.arm, BLOCK, BOX, fail_picks=1)
    t = await _trial(sim_daemon, tmp_path, fk_data_dir, eyes)
    assert t.status == "completed" and t.outcome["pick_attempts"] == 2, t.reason
    opens = _pose_at_gripper(t, "open")
    retry = [(pose, e) for pose, e in opens if e["stage"] == "retry_pick"]
    assert len(retry) == 1
    pose, _e = retry[0]
    (pick,) = [c for c in _decisions(t, "command") if c["value"]["note"] == "pick descend"][:1]
    # sent to the pick pose (the tip at the block's grasp height, 10-40 mm above the mat)
    # and arrived there within the move's tolerance before the gripper opened
    lowered = [
        c for c in _decisions(t, "command") if c["value"]["note"] == "retry: lower to the mat"
    ]
    assert len(lowered) == 1 and lowered[0]["value"]["angles"] == pick["value"]["angles"]
    assert float(fk_tip(lowered[0]["value"]["angles"])[1]) < 0.045
    assert max(abs(a - b) for a, b in zip(pose, pick["value"]["angles"], strict=True)) <= 3.5
    # HOME follows the open (re-detect sees the mat unobstructed)
    notes = [c["value"]["note"] for c in _decisions(t, "command") if c["stage"] == "retry_pick"]
    assert notes[-1] == "home before re-detect"


# ------------------------------------------------------------------ the real workcell


def _sim_settings(root: Path, fk: Path, d: SimDaemon, wc: Workcell) -> RuntimeSettings:
    return _settings(root, fk, daemon_port=d.port, top_camera=wc.urls["top"])


@pytest.fixture
def workcell(sim_daemon: SimDaemon) -> Any:
    wc = start_workcell(
        sim_daemon.arm, "standard", 1, camera_port=0, config=WorkcellConfig(top_fps=8.0)
    )
    yield wc
    wc.close()


def _slip_out_of_the_opening(wc: Workcell, dx_m: float) -> None:
    """The held block slips sideways in the jaws (it stays held)."""
    with wc.scene.lock:
        ox, oy, oz = wc.scene.grasp_offset
        wc.scene.grasp_offset = (ox + dx_m, oy, oz)
    wc.step()


def _drop_out_of_the_jaws(wc: Workcell, into_box: bool = False) -> None:
    """The block falls out of the jaws: in transit onto the mat far from the box, or over the
    box onto its floor (``into_box``; harsh, 3 of 60)."""
    with wc.scene.lock:
        sc = wc.scene
        if into_box:
            bx, bz, _yaw = sc.box
            sc.resting_on = sc.place_outcome = "box"
            sc.block_xyz = [bx, BOX_FLOOR_M + BLOCK_SIZE_M / 2, bz]
        else:
            sc.resting_on, sc.block_xyz = "mat", [0.05, 0.0125, 0.33]
        sc.grasped = False
        sc.bump()
    wc.arm.block_gripper_at(None)


@pytest.mark.slow
@pytest.mark.anyio
async def test_sim_block_slipped_outside_the_opening_is_not_released(
    sim_daemon: SimDaemon, workcell: Workcell, tmp_path: Path, fk_data_dir: Path
) -> None:
    def on_stage(stage: str, outcome: str, reason: str) -> None:
        if stage == "servo_place" and outcome == "ok":
            _slip_out_of_the_opening(workcell, 0.045)

    # no re-aim, held in the hover: the refusal itself (the re-aim is the next test's)
    s = _sim_settings(tmp_path, fk_data_dir, sim_daemon, workcell).updated(
        {"pick_place.release_reaim_max": 0, "pick_place.release_refused": "hold"}
    )
    async with open_rig(s) as (rig, _client):
        t = await run_trial(rig, on_stage=on_stage)
    assert t.status == "stopped" and t.held, t.reason
    assert t.reason.startswith("release refused: block not seen above the box opening (top: ")
    (check,) = _decisions(t, "release_check")
    view = next(e["value"] for e in read_trace(t.trace_path) if e.get("kind") == "release_view")
    assert check["value"]["confirmed"] is False
    # real perception: either not found near the box, or found outside the opening
    assert view["margin_mm"] is None or view["margin_mm"] < s.pick_place.release_margin_mm
    truth = workcell.truth()
    assert truth["grasped"] and truth["place_outcome"] is None  # still in the jaws, never dropped
    assert not any(e["kind"] == "release" for e in truth["events"])
    assert [g["value"]["action"] for g in _decisions(t, "gripper")] == ["open", "close"]
    assert _decisions(t, "command")[-1]["value"]["note"] == "release refused: hover"
    assert sim_daemon.arm.get_fresh_mode() == 0
    await _replays_identically(t, fk_data_dir)


@pytest.mark.slow
@pytest.mark.anyio
async def test_sim_block_dropped_in_transit_is_not_released(
    sim_daemon: SimDaemon, workcell: Workcell, tmp_path: Path, fk_data_dir: Path
) -> None:
    def on_stage(stage: str, outcome: str, reason: str) -> None:
        if stage == "servo_place" and outcome == "ok":
            _drop_out_of_the_jaws(workcell)

    s = _sim_settings(tmp_path, fk_data_dir, sim_daemon, workcell).updated(
        {"pick_place.release_refused": "hold"}
    )
    async with open_rig(s) as (rig, _client):
        t = await run_trial(rig, on_stage=on_stage)
    # seen neither near the box nor at the tip: the place is judged first (it is not in the
    # box), then, seen nowhere, the block is treated as possibly held: back over the box
    (lost,) = _decisions(t, "block_lost")
    assert (
        "the block is not in the jaws: block not seen above the box opening" in lost["value"]["why"]
    )
    assert t.outcome["place_verdict"] == "no"
    assert t.status == "stopped", t.reason
    assert t.reason == (
        "retreat_and_judge: the block is not in the box and not seen at the tip: it may still "
        "be in the gripper, out of sight"
    ), t.reason
    assert [g["value"]["action"] for g in _decisions(t, "gripper")] == ["open", "close"]
    assert _decisions(t, "command")[-1]["value"]["note"] == "held after all: back over the box"
    # a block not seen at all is not re-aimed (nothing to steer), and not announced as held
    assert not _decisions(t, "release_reaim")
    assert t.held_evidence == "not_seen"


@pytest.mark.slow
@pytest.mark.anyio
async def test_sim_block_that_fell_into_the_box_before_the_release_is_judged_placed(
    sim_daemon: SimDaemon, workcell: Workcell, tmp_path: Path, fk_data_dir: Path
) -> None:
    """Not refused and "put back" with empty jaws: the block is seen neither near the tip
    over the box nor at the tip, so the place is judged where it went, and it is in the box."""

    def on_stage(stage: str, outcome: str, reason: str) -> None:
        if stage == "servo_place" and outcome == "ok":
            _drop_out_of_the_jaws(workcell, into_box=True)

    s = _sim_settings(tmp_path, fk_data_dir, sim_daemon, workcell)
    async with open_rig(s) as (rig, _client):
        t = await run_trial(rig, on_stage=on_stage)
    assert t.status == "completed" and t.outcome["place_verdict"] == "yes", t.reason
    (look,) = _decisions(t, "held_block_check")
    assert look["stage"] == "release" and look["value"]["seen"] is False
    assert [d["value"]["confirmed"] for d in _decisions(t, "release_check")] == [False]
    # nothing opened over the box or on the mat: the jaws were already empty
    assert [g["value"]["action"] for g in _decisions(t, "gripper")] == ["open", "close"]
    assert not _decisions(t, "put_back") and not t.held
    assert workcell.truth()["block"]["resting_on"] == "box"


@pytest.mark.slow
@pytest.mark.anyio
async def test_sim_block_slipped_in_the_jaws_is_re_aimed_and_lands_in_the_box(
    sim_daemon: SimDaemon, workcell: Workcell, tmp_path: Path, fk_data_dir: Path
) -> None:
    """The release check refuses a block that slipped 30 mm in the jaws; the re-aim steers it
    over the box as the top camera finds it, the check confirms, and the simulator's truth
    says it landed in the box."""

    def on_stage(stage: str, outcome: str, reason: str) -> None:
        if stage == "servo_place" and outcome == "ok":
            _slip_out_of_the_opening(workcell, 0.030)

    s = _sim_settings(tmp_path, fk_data_dir, sim_daemon, workcell)
    async with open_rig(s) as (rig, _client):
        t = await run_trial(rig, on_stage=on_stage)
    checks = _decisions(t, "release_check")
    assert checks[0]["value"]["confirmed"] is False, checks[0]
    assert _decisions(t, "release_reaim")
    assert t.status == "completed" and checks[-1]["value"]["confirmed"] is True, t.reason
    # the re-aim went up to the hover and came down again, never steering low in the box
    notes = [c["value"]["note"] for c in _decisions(t, "command") if c["stage"] == "release"]
    assert notes[0].startswith("re-aim 1: up") and "re-aim 1: descend" in notes, notes
    assert workcell.truth()["place_outcome"] == "box"
    await _replays_identically(t, fk_data_dir)


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("seed", [None, 3, 5, 8])
async def test_sim_normal_place_is_confirmed_then_released(
    sim_daemon: SimDaemon, workcell: Workcell, tmp_path: Path, fk_data_dir: Path, seed: int | None
) -> None:
    if seed is not None:  # a random layout (block, box yaw, lighting) instead of the standard one
        workcell.next_scene(layout=random_layout(seed))
    s = _sim_settings(tmp_path, fk_data_dir, sim_daemon, workcell)
    async with open_rig(s) as (rig, _client):
        t = await run_trial(rig)
    assert t.status == "completed", t.reason
    (check,) = _decisions(t, "release_check")
    assert check["value"]["confirmed"] is True, check
    assert workcell.truth()["place_outcome"] == "box"
    (up,) = _decisions(t, "height_update")
    assert up["value"]["dist_mm"] is not None and math.isfinite(up["value"]["margin_mm"])
    view = next(e["value"] for e in read_trace(t.trace_path) if e.get("kind") == "release_view")
    print(f"release view seed={seed}: {view} height: {up['value']}")  # figures for docs


@pytest.mark.slow
@pytest.mark.anyio
async def test_last_failed_pick_puts_the_block_down_at_the_mat_then_goes_home(
    sim_daemon: SimDaemon, tmp_path: Path, fk_data_dir: Path
) -> None:
    eyes = TrueStateEyes(sim_daemon.arm, BLOCK, BOX, fail_picks=5)
    t = await _trial(sim_daemon, tmp_path, fk_data_dir, eyes, max_pick_attempts=2)
    assert t.status == "stopped" and "judged no after 2 attempts" in t.reason, t.reason
    assert not t.held
    opens = [(p, e) for p, e in _pose_at_gripper(t, "open") if e["stage"] == "abort"]
    cmds = [c for c in _decisions(t, "command") if c["stage"] == "abort"]
    lowered = next(c for c in cmds if c["value"]["note"] == "abort: lower to the mat")
    assert len(opens) == 1 and float(fk_tip(lowered["value"]["angles"])[1]) < 0.045  # at the mat
    assert (
        max(abs(a - b) for a, b in zip(opens[0][0], lowered["value"]["angles"], strict=True)) <= 3.5
    )
    # over the block first when the pick came down from the hover (the judge looked from the arc)
    notes = [c["value"]["note"] for c in cmds]
    assert notes in (
        ["abort: lower to the mat", "abort: up", "abort: home"],
        ["abort: over the block", "abort: lower to the mat", "abort: up", "abort: home"],
    ), notes


def _operator_takes_it_out(workcell: Workcell, asked: list[bool]) -> Any:
    """``resolve_held`` of an operator who takes the block out when asked: the scene laid
    out again (the block back on the mat, by hand); each question noted in ``asked``."""

    async def took_it_out() -> bool:
        asked.append(True)
        workcell.next_scene(layout=random_layout(3))
        return True

    return took_it_out


@pytest.mark.slow
@pytest.mark.anyio
async def test_sim_service_stops_after_a_trial_that_left_the_block_held(
    sim_daemon: SimDaemon, workcell: Workcell, tmp_path: Path, fk_data_dir: Path
) -> None:
    # a margin no block can have (25 mm block in a 70 mm opening: at most 22.5 mm): every
    # release is refused by the real perception
    s = _sim_settings(tmp_path, fk_data_dir, sim_daemon, workcell).updated(
        {"pick_place.release_margin_mm": 40.0, "trials": 2, "pick_place.release_refused": "hold"}
    )
    out = io.StringIO()
    report = await run_service(s, out=out)
    assert len(report.trials) == 1 and report.trials[0].held
    assert report.stopped_by == "block held in the gripper (take it out by hand)"
    said = out.getvalue()
    assert "release refused: block not seen above the box opening" in said
    assert "BLOCK STILL IN THE GRIPPER" in said and "HOLDING THE BLOCK (seen at the tip)" in said
    assert workcell.truth()["grasped"]
    # the operator's memory across the stop: the next session on this root asks before its
    # first trial would open the gripper at HOME; unattended, it starts no trial at all
    memory = DataRoot(s.data_root).held_block
    assert json.loads(memory.read_text())["run_stem"] == report.trials[0].run_stem
    margin = RuntimeSettings().pick_place.release_margin_mm  # releases allowed again
    one = s.updated({"trials": 1, "pick_place.release_margin_mm": margin})
    out = io.StringIO()
    again = await run_service(one, out=out)
    assert again.trials == [] and again.stopped_by.startswith("block held since the last session")
    assert "the last session ended with the BLOCK IN THE GRIPPER" in out.getvalue()
    assert workcell.truth()["grasped"]  # the jaws never opened
    # with --confirm the operator is asked once, takes it out, and the trial runs
    asked: list[bool] = []
    took_it_out = _operator_takes_it_out(workcell, asked)

    out = io.StringIO()
    again = await run_service(one, out=out, resolve_held=took_it_out)
    assert asked == [True] and len(again.trials) == 1, again.stopped_by  # asked before it
    assert not again.trials[0].held and not memory.exists()
    assert "the operator took the block out: the session goes on" in out.getvalue()


@pytest.mark.slow
@pytest.mark.anyio
async def test_sim_service_goes_on_when_the_operator_takes_the_held_block_out(
    sim_daemon: SimDaemon, workcell: Workcell, tmp_path: Path, fk_data_dir: Path
) -> None:
    """With ``--confirm`` (``resolve_held``), a stop holding the block asks the operator; one
    who takes it out (here: the scene laid out again, the jaws empty) lets the session go on."""
    s = _sim_settings(tmp_path, fk_data_dir, sim_daemon, workcell).updated({"pick_place.release_margin_mm": 40.0, "trials": 2, "pick_place.release_refused": "hold",
                "pick_place.release_reaim_max": 0})  # fmt: skip
    asked: list[bool] = []
    took_it_out = _operator_takes_it_out(workcell, asked)

    out = io.StringIO()
    report = await run_service(s, out=out, resolve_held=took_it_out)
    assert len(report.trials) == 2 and len(asked) == 2, report.stopped_by
    assert not report.stopped_by
    assert "the operator took the block out: the session goes on" in out.getvalue()


@pytest.mark.slow
@pytest.mark.anyio
async def test_sim_service_goes_on_after_a_refused_release_put_back(
    sim_daemon: SimDaemon, workcell: Workcell, tmp_path: Path, fk_data_dir: Path
) -> None:
    """Unattended (the default): every release is refused, each block goes back on the mat,
    and the session runs all its trials; the world agrees the jaws are empty."""
    s = _sim_settings(tmp_path, fk_data_dir, sim_daemon, workcell).updated(
        {"pick_place.release_margin_mm": 40.0, "trials": 2, "pick_place.release_reaim_max": 0}
    )
    out = io.StringIO()
    report = await run_service(s, out=out)
    assert len(report.trials) == 2 and not report.stopped_by, report.stopped_by
    for t in report.trials:
        assert t.status == "stopped" and not t.held
        assert t.reason.endswith("; the block was put back on the mat"), t.reason
    truth = workcell.truth()
    assert not truth["grasped"] and truth["block"]["resting_on"] == "mat"
    assert "BLOCK STILL IN THE GRIPPER" not in out.getvalue()


@pytest.mark.slow
@pytest.mark.anyio
async def test_sim_place_at_the_highest_learned_height_lands_and_stays_bounded(
    sim_daemon: SimDaemon, workcell: Workcell, tmp_path: Path, fk_data_dir: Path
) -> None:
    s = _sim_settings(tmp_path, fk_data_dir, sim_daemon, workcell)
    mem = HeightMemory(DataRoot(tmp_path).height_memory)
    mem.entries["place_x-200_z180"] = {"dee_y_mm": s.pick_place.height_max_mm, "n": 5}
    mem.save()
    async with open_rig(s) as (rig, _client):
        t = await run_trial(rig)
    assert t.status == "completed", t.reason
    (band,) = _decisions(t, "place_band")
    assert band["value"]["dee_y_mm"] == s.pick_place.height_max_mm
    (check,) = _decisions(t, "release_check")
    assert check["value"]["confirmed"] is True, check
    assert workcell.truth()["place_outcome"] == "box"
    (up,) = _decisions(t, "height_update")
    assert (up["value"]["old_mm"], up["value"]["dee_y_mm"]) == (30.0, 30.0)
    assert up["value"]["change"] == "keep"
