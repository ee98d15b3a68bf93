"""The rollout task (docs/rollouts.md): a policy drives the arm through the safe arm, the rig
judges where the block ended, ``mecharm eval`` says how often, with its interval.

In its parts without a rig (the playback, the dataset reader, the interval, the refusals),
then on the simulated rig against the world's truth: a policy that reaches past the limits
is held by the guards and hits nothing; a gripper a policy left closed is opened where it
closed; a recorded episode of a scripted trial, played back by ``mecharm eval`` on its own
scene, puts the block in the box.
"""

from __future__ import annotations

import asyncio
import csv
import itertools
import json
import math
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mecharm.common.config import load_settings
from mecharm.common.kinematics import fk_tip
from mecharm.common.layout import FK_DIR, DataRoot
from mecharm.runtime.cli import main as runtime_main
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.control import Action, Observation
from mecharm.runtime.guard import check_pose
from mecharm.runtime.ports import VerdictObservation
from mecharm.runtime.records.ledger import verify_ledger
from mecharm.runtime.records.trace import read_trace
from mecharm.runtime.rigsetup import open_rig
from mecharm.runtime.rollout import RECORDS, TASK, Stage
from mecharm.runtime.rollout.body import (
    JUDGED_IN_BOX,
    LOOK_CLEAR_M,
    LOOKS_PER_RELEASE,
    ReleaseWatch,
    arm_clear_of_box,
)
from mecharm.runtime.rollout.policies import (
    EpisodePlayback,
    PolicyError,
    load_policy,
    policy_spec_problem,
    read_episode_actions,
)
from mecharm.runtime.simcontrol import scene_next, scene_truth
from mecharm.runtime.tasks import TASKS
from mecharm.runtime.trial import TrialSummary, run_trial
from mecharm.tools.cli import main as mecharm_main
from mecharm.tools.evaluation import summarize, wilson
from mecharm.tools.export.config import ExportSettings
from mecharm.tools.export.lerobot import export_lerobot
from mecharm.tools.simrig import start_sim_daemon

HOME = (0.0, 0.0, 0.0, 0.0, 0.0, -30.0)
POLICIES = "python:tests.tasks.rollout_policies"
NAMES = [f"j{i}.pos" for i in range(6)] + ["gripper.pos"]


def _obs(joints: tuple[float, ...], step: int = 0) -> Observation:
    return Observation(step, 0.0, joints, 100)


# ------------------------------------------------------------------ parts, no rig


def test_playback_keeps_the_recording_s_pace_and_follows_the_arm() -> None:
    x = (10.0, *HOME[1:])
    a = [Action(HOME, 100), Action(x, 100), Action(x, 20), Action(HOME, 20)]
    p = EpisodePlayback("t", a, hold_ticks=2, tol_deg=3.0, wait_ticks=10)
    assert p(_obs(HOME, 0)) == a[0]  # the first tick sends the first frame
    assert p(_obs(HOME, 1)) == a[0]  # each frame lasts its recorded time (2 ticks) ...
    assert p(_obs(HOME, 2)) == a[1]
    # ... and until the arm is there; for a gripper change within 1° (tol / 3)
    assert p(_obs((8.0, *HOME[1:]), 4)) == a[1]
    assert p(_obs((9.5, *HOME[1:]), 5)) == a[2]
    assert p(_obs((9.5, *HOME[1:]), 7)) == a[3]
    assert p(_obs(HOME, 9)) is None  # the last one reached: done
    assert p.unreached == 0
    # ticks an overrun skipped count: a frame lasts its time, not the policy's calls
    p2 = EpisodePlayback("t", a, hold_ticks=5, tol_deg=3.0, wait_ticks=10)
    assert [p2(_obs(HOME, 0)), p2(_obs(HOME, 9))] == [a[0], a[1]]
    # an arm that never gets there (a stall, a refusal) moves on after wait_ticks
    q = EpisodePlayback("t", a[:2], hold_ticks=1, tol_deg=1.0, wait_ticks=3)
    far = (-20.0, *HOME[1:])
    got = [q(_obs(far, k)) for k in range(5)]
    assert got == [a[0], a[0], a[0], a[1], a[1]]
    assert q.unreached == 1


def _dataset(root: Path, names: list[str], rows: list[tuple[int, int, list[float]]],
             fps: int = 10, scale: float | None = None) -> Path:  # fmt: skip
    (root / "meta").mkdir(parents=True)
    (root / "data" / "chunk-000").mkdir(parents=True)
    info = {"fps": fps, "features": {"action": {"dtype": "float32", "shape": [len(names)],
                                                "names": names}}}  # fmt: skip
    info["features"]["observation.state"] = {"dtype": "float32", "shape": [len(names)],
                                             "names": names}  # fmt: skip
    (root / "meta" / "info.json").write_text(json.dumps(info), encoding="utf-8")
    table = pa.table({
        "episode_index": [r[0] for r in rows], "frame_index": [r[1] for r in rows],
        "action": [r[2] for r in rows],
        # where the arm was: the action's joints less one degree (it lags the command)
        "observation.state": [[v - 1.0 for v in r[2][:6]] + r[2][6:] for r in rows],
    })  # fmt: skip
    pq.write_table(table, root / "data" / "chunk-000" / "file-000.parquet")
    if scale is not None:
        manifest = {"episodes": [{"episode_index": 1, "time_scale": scale}]}
        (root / "meta" / "mecharm_export.json").write_text(json.dumps(manifest), "utf-8")
    return root


def _info(root: Path, info: Any) -> Path:
    (root / "meta").mkdir(parents=True)
    (root / "meta" / "info.json").write_text(json.dumps(info), encoding="utf-8")
    return root


def test_an_episode_is_read_in_frame_order_at_its_real_rig_pace(tmp_path: Path) -> None:
    rows = [(1, 1, [1.0] * 6 + [20.0]), (0, 0, [9.0] * 7), (1, 0, [0.5] * 6 + [100.0])]
    root = _dataset(tmp_path / "ds", NAMES, rows, fps=10, scale=5.0)
    actions, fps = read_episode_actions(root, 1)
    assert actions == [Action((0.5,) * 6, 100), Action((1.0,) * 6, 20)]
    assert fps == 2.0  # 10 fps of a 5x recording: 2 frames per real-rig second
    assert read_episode_actions(root, 0)[1] == 10.0  # no time scale for it: real time
    # the measured path: the state's joints, the action's gripper
    states, _fps = read_episode_actions(root, 1, "state")
    assert states == [Action((-0.5,) * 6, 100), Action((0.0,) * 6, 20)]
    # played back, a pose past the guard's limits is aimed at the limit (a measured j1 of
    # 89.3° where the command was j1_max 88°), never sent to be refused frame after frame
    sag = _dataset(tmp_path / "sag", NAMES, [(0, 0, [0.0, 90.3, 0.0, 0.0, 0.0, -30.0, 100.0])])
    played = load_policy(f"episode:{sag}", RuntimeSettings.model_validate({}))
    assert played(_obs(HOME, 0)) == Action((-1.0, 88.0, -1.0, -1.0, -1.0, -31.0), 100)
    # a dataset whose columns are in another order, under the first export's names
    legacy = ["gripper"] + [f"j{i}" for i in range(6)]
    root2 = _dataset(tmp_path / "ds2", legacy, [(0, 0, [50.0, 1, 2, 3, 4, 5, 6])])
    assert read_episode_actions(root2, 0)[0] == [Action((1.0, 2.0, 3.0, 4.0, 5.0, 6.0), 50)]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p, "not a LeRobot dataset"),
        (lambda p: _dataset(p, ["a", "b"], [(0, 0, [1.0, 2.0])]), "a mechArm dataset has"),
        (lambda p: _info(p, {"fps": 10, "features": []}), "no fps or no features"),
        (lambda p: _info(p, {"fps": 10, "features": {"action": {"names": [1, 2]}}}), "no names"),
        (lambda p: _info(p, [1, 2]), "no fps or no features"),
        (lambda p: _dataset(p, NAMES, [(3, 0, [0.0] * 7)]), "no episode 0"),
        (lambda p: _dataset(p, NAMES, [(0, 0, [math.nan] * 7)]), "not 7 finite values"),
    ],
)
def test_a_dataset_that_cannot_be_played_is_refused_with_what_is_wrong(
    tmp_path: Path, make: Any, message: str
) -> None:
    root = make(tmp_path / "ds")
    root.mkdir(parents=True, exist_ok=True)
    with pytest.raises(PolicyError, match=message):
        read_episode_actions(root, 0)


def test_policy_specs_are_checked_before_anything_moves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert policy_spec_problem("episode:/data/ds#2") is None
    assert policy_spec_problem(f"{POLICIES}:reach_too_far") is None
    for bad in ("foo", "episode:", "python:no_name", "episode:/ds#x", "episode:/ds#²", "torch:/x"):
        assert policy_spec_problem(bad), bad
    with pytest.raises(ValueError, match="give episode:DATASET"):
        RuntimeSettings.model_validate({"rollout": {"policy": "bogus"}})
    s = RuntimeSettings.model_validate({})
    with pytest.raises(PolicyError, match="has no 'nope'"):
        load_policy(f"{POLICIES}:nope", s)
    with pytest.raises(PolicyError, match="the side camera is the recorder's"):
        load_policy(f"{POLICIES}:wants_the_side_camera", s)
    with pytest.raises(PolicyError, match=r"cannot be imported \(RuntimeError: broken on import"):
        load_policy("python:tests.tasks.rollout_broken_policy:make", s)
    # the runtime's command line: exit 2 with one line, no traceback, no session started
    root = tmp_path / "root"
    root.mkdir()
    for argv, said in (
        ([], "the rollout task needs a policy"),
        (["--policy", f"episode:{tmp_path}/none"], "not a LeRobot dataset"),
        (["--policy", "lerobot"], "give episode:DATASET"),
    ):
        code = runtime_main(["--task", "rollout", "--data-root", str(root), "--dry-run", *argv])
        err = capsys.readouterr().err
        assert code == 2 and said in err and "Traceback" not in err, err
    assert not (root / "logs").exists()


def test_eval_refuses_what_it_cannot_do_before_it_starts_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One line and exit 2, no data root made, no rig started: the outside test's cases."""
    ds = _dataset(tmp_path / "ds", NAMES, [(0, 0, [0.0] * 7)])
    ok = f"episode:{ds}#0"
    bad_ledger = tmp_path / "bad"
    (bad_ledger / "runs").mkdir(parents=True)
    (bad_ledger / "runs" / "rollout_ledger.csv").write_bytes(bytes(range(128, 256)) * 4)
    (tmp_path / "afile").write_text("x")
    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * 5000 + "]" * 5000)
    new = tmp_path / "never"
    for argv, said in (
        ([ok, "--data-root", str(new), "--sim-profile", "nonsense"], "unknown name"),
        ([ok, "--data-root", str(new), "--sim-profile", str(deep)], "nested too deeply"),
        (
            [ok, "--data-root", str(new), "--sim-python", str(tmp_path / "afile")],
            "not an executable",
        ),
        ([ok, "--data-root", str(new), "--time-scale", "6"], "ticks 60 times a second"),
        ([ok, "--data-root", str(new), "--json", str(tmp_path / "afile" / "o.json")], "no folder"),
        ([ok, "--data-root", str(new), "--json", str(tmp_path)], "is a folder"),
        (["", "--no-run", "--data-root", str(bad_ledger)], "give episode:DATASET"),
        ([ok, "--no-run", "--data-root", str(bad_ledger)], "not a readable ledger"),
    ):
        assert mecharm_main(["eval", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not new.exists()
    # hostile dataset and policy files: one PolicyError each
    (tmp_path / "nested" / "meta").mkdir(parents=True)
    (tmp_path / "nested" / "meta" / "info.json").write_text("[" * 100_000 + "]" * 100_000)
    s = RuntimeSettings.model_validate({})
    for spec, said in (
        (f"episode:{tmp_path / 'nested'}", "unreadable"),
        (f"episode:{_info(tmp_path / 'tiny', {'fps': 1e-310, 'features': {}})}", "no fps"),
        (f"episode:{_info(tmp_path / 'yes', {'fps': True, 'features': {}})}", "no fps"),
        ("episode:~no_such_user_here/x", "home directory"),
        ("python:sys:exit", "SystemExit"),
    ):
        with pytest.raises(PolicyError, match=said):
            load_policy(spec, s)


def _verdict(verdict: str) -> VerdictObservation:
    return VerdictObservation(verdict, 0.9, "test", "geometric")


def test_the_judge_looks_a_while_after_the_policy_lets_go_and_a_yes_ends_it() -> None:
    """Open after closed: the judge looks ``after_s`` of ticks later; a re-grasp before then
    starts again; an open gripper that never closed is no release; None never looks."""
    w = ReleaseWatch(2.0, 10.0)
    grips = [100] * 5 + [20] * 10 + [100] * 5 + [20] * 3 + [100] * 25
    due = [w.due(tick, g) for tick, g in enumerate(grips)]
    assert w.released_at == 23 and due.index(True) == 43  # 20 ticks after the last release
    assert not any(due[:43])
    assert w.looked(43, _verdict("yes")) and w.ended and w.looks == 1
    assert not w.due(44, 100)  # over: the loop stops on it
    never = ReleaseWatch(None, 10.0)
    assert not any(never.due(t, g) for t, g in enumerate(grips))
    opened = ReleaseWatch(0.0, 10.0)
    assert not any(opened.due(t, 100) for t in range(50))  # never closed: nothing let go
    assert opened.released_at is None


def test_a_miss_is_looked_at_again_a_few_times_then_the_policy_goes_on() -> None:
    """After a "no" the judge looks again ``after_s`` later, ``LOOKS_PER_RELEASE`` looks in
    all; then none until the next release, whose looks are counted afresh."""
    w = ReleaseWatch(1.0, 10.0)
    for t in range(5):
        w.due(t, 20)
    assert not w.due(5, 100) and not any(w.due(t, 100) for t in range(6, 15)) and w.due(15, 100)
    assert not w.looked(15, _verdict("no")) and w.wait_left == 10
    assert not any(w.due(t, 100) for t in range(16, 25)) and w.due(25, 100)
    assert not w.looked(25, _verdict("no"))
    assert not any(w.due(t, 100) for t in range(26, 35)) and w.due(35, 100)
    assert not w.looked(35, _verdict("no")) and w.wait_left is None
    assert LOOKS_PER_RELEASE == 3 and w.looks == 3
    assert not any(w.due(t, 100) for t in range(36, 100))
    w.due(100, 20)  # grasped again, released again: looked at again, three times again
    assert not w.due(101, 100) and not any(w.due(t, 100) for t in range(102, 111))
    assert w.due(111, 100) and not w.looked(111, _verdict("no")) and w.wait_left == 10
    assert not any(w.due(t, 100) for t in range(112, 121))
    assert w.due(121, 100) and w.looked(121, _verdict("yes")) and w.ended and w.looks == 5


def test_the_waits_count_the_ticks_the_policy_ran_not_the_ticks_a_slow_look_skipped() -> None:
    """On a loaded machine a look takes longer than ``after_s`` and the loop skips the ticks
    it overran: the next look still waits ``after_s`` of the policy's ticks, so the arm has
    moved between two looks (in one clean-clone CI the three looks came back to back, the arm
    still over the box, and all said no)."""
    w = ReleaseWatch(1.0, 10.0)
    w.due(0, 20)
    ticks = iter(range(1, 10_000, 50))  # every call 50 ticks after the one before
    calls = [w.due(next(ticks), 100) for _ in range(11)]
    assert calls == [False] * 10 + [True]  # the release, then ten of the policy's ticks
    w.looked(501, _verdict("no"))
    assert [w.due(next(ticks), 100) for _ in range(10)] == [False] * 9 + [True]


def test_a_look_that_is_due_waits_while_the_arm_hides_the_box() -> None:
    """The top camera sees the block between the jaws while the arm is over the box: the
    look waits for the first tick the arm is clear (not counted as a look), then looks."""
    w = ReleaseWatch(1.0, 10.0)
    w.due(0, 20)
    w.due(1, 100)
    asked: list[int] = []

    def over_the_box_until(tick: int) -> Any:
        return lambda t=tick: asked.append(t) or t >= 25

    assert not any(w.due(t, 100, over_the_box_until(t)) for t in range(2, 11))
    assert asked == []  # not asked before a look is due: the forward kinematics cost a little
    assert not any(w.due(t, 100, over_the_box_until(t)) for t in range(11, 25))
    assert w.held_off and w.looks == 0 and asked == list(range(11, 25))
    assert w.due(25, 100, over_the_box_until(25)) and not w.held_off
    assert w.looked(25, _verdict("yes"))


def test_the_arm_is_clear_of_the_box_when_no_link_comes_near_it_from_above() -> None:
    """``arm_clear_of_box``: HOME is clear of ``make run``'s first box (seed 7); the arm
    reaching over the box, or only passing its forearm over it, is not."""
    box = (-0.187, 0.177)  # seed 7's box, as detect found it
    assert arm_clear_of_box(RuntimeSettings().arm.home, box)
    over = (46.6, 10.0, -10.0, 0.0, 30.0, 0.0)  # the tip 15 cm above the box's centre
    tip = fk_tip(over)
    assert math.hypot(tip[0] - box[0], tip[2] - box[1]) < 0.01 and tip[1] > 0.14
    assert not arm_clear_of_box(over, box)
    # a box nearer the base: the tip beyond it, the forearm and wrist above it
    near = (-0.0655, 0.062)
    reach = (46.6, 0.0, -20.0, 0.0, 30.0, 0.0)
    tip = fk_tip(reach)
    assert math.hypot(tip[0] - near[0], tip[2] - near[1]) > LOOK_CLEAR_M
    assert not arm_clear_of_box(reach, near)
    assert arm_clear_of_box(reach, (-box[0], box[1]))  # seed 7's box mirrored: on the other side


@pytest.mark.parametrize(
    ("key", "value"),
    [("rollout.after_release_s", -1.0), ("rollout.after_release_s", 61.0),
     ("arm.stream_speed", 0), ("arm.stream_speed", 101)],
)  # fmt: skip
def test_the_new_keys_refuse_values_out_of_bounds_naming_them(key: str, value: float) -> None:
    from mecharm.common.config import ConfigError

    with pytest.raises(ConfigError, match=key.split(".")[-1]):
        load_settings(RuntimeSettings, overrides={key: value})


def test_a_look_that_ended_the_episode_is_not_the_trial_s_verdict() -> None:
    """A look said yes and ended the rollout, then the way back stopped before the judge at
    HOME: the records have no place verdict and no success (the look is a ``look_verdict``
    input, not a ``place_verdict``)."""
    yes = {"verdict": "yes", "confidence": 0.95, "reason": "in the box", "judge": "geometric"}
    lines = [
        {"event": "decision", "kind": "rollout_policy", "stage": "rollout", "value": {"policy": "p"}},
        {"event": "input", "kind": "look_verdict", "stage": "rollout", "value": yes},
        {"event": "decision", "kind": "control_loop", "stage": "rollout",
         "value": {"ticks": 40, "missed": 2, "clamped": 0, "refused": 0,
                   "stopped_by": JUDGED_IN_BOX}},
    ]  # fmt: skip
    row = RECORDS.from_trace(lines)
    assert row["stopped_by"] == JUDGED_IN_BOX and row["place_verdict"] == ""
    assert not RECORDS.succeeded(row)
    at_home = [*lines, {"event": "input", "kind": "place_verdict", "stage": "judge_rollout",
                        "value": yes}]  # fmt: skip
    assert RECORDS.succeeded(RECORDS.from_trace(at_home))


def test_the_task_is_registered_with_its_records() -> None:
    assert TASKS["rollout"] is TASK and TASK.records is RECORDS
    assert TASK.first == Stage.OPEN_GRIPPER_HOME
    assert RECORDS.succeeded({"place_verdict": "yes"}) and not RECORDS.succeeded({})


def test_the_wilson_interval_and_the_tally() -> None:
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    lo, hi = wilson(5, 10)
    assert (lo, hi) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))
    assert wilson(10, 10)[1] == 1.0 and wilson(0, 0) == (0.0, 1.0)
    rows = [
        {"run_stem": "a", "policy": "p", "status": "completed", "place_verdict": "yes", "scene_seed": "7"},
        {"run_stem": "b", "policy": "p", "status": "stopped", "place_verdict": "", "scene_seed": "7"},
        {"run_stem": "c", "policy": "p", "status": "completed", "place_verdict": "no", "scene_seed": "8"},
        {"run_stem": "d", "policy": "other", "status": "completed", "place_verdict": "yes", "scene_seed": "8"},
    ]  # fmt: skip
    s = summarize(rows, "p", {"a": True, "c": True})
    d = s.to_dict()
    assert (d["episodes"], d["successes"], d["stopped"]) == (3, 1, 1)
    assert d["per_scene"]["7"]["successes"] == 1 and d["per_scene"]["8"]["episodes"] == 1
    # the truth: c's block is in the box though the judge said no
    assert d["truth"] == {"episodes": 2, "in_box": 2, "ci95": [0.3424, 1.0], "judge_wrong": 1}
    assert "judge wrong on 1" in s.table()


# ------------------------------------------------------------------ on the simulated rig

SCALE = 5.0  # 10 ticks per real-rig second are 50 a second: the control loop's limit


def _session(tmp: Path, fk: Path, policy: str, seed: int, port: int, top: str) -> TrialSummary:
    root = tmp / "root"
    root.mkdir(exist_ok=True)
    settings = load_settings(
        RuntimeSettings,
        overrides={
            "task": "rollout", "data_root": root, "fk_data_dir": fk, "daemon.port": port,
            "perception.top_camera": top, "recorder.enabled": False, "time_scale": SCALE,
            "rollout.policy": policy, "viewing.rerun_after_trial": False,
            "motion.arrival_min_s": 20.0,  # the rig's 8 s minimum is tight on a loaded machine
        },
    )  # fmt: skip

    async def one() -> TrialSummary:
        async with open_rig(settings) as (r, _client):
            return await run_trial(r, scene_seed=seed)

    return asyncio.run(one())


def _steps(t: TrialSummary) -> list[dict[str, Any]]:
    return [e["value"] for e in read_trace(t.trace_path)
            if e["event"] == "decision" and e["kind"] == "stream_step"]  # fmt: skip


@pytest.mark.slow
def test_a_policy_is_held_by_the_guards_and_a_closed_gripper_is_opened_where_it_closed(
    tmp_path: Path, fk_data_dir: Path
) -> None:
    seed = 11301  # a scene no other test tunes on
    rig = start_sim_daemon(tmp_path / "logs", seed=seed, time_scale=SCALE)
    try:
        scene_next(rig.control_url, seed)
        reach = _session(tmp_path, fk_data_dir, f"{POLICIES}:reach_too_far", seed,
                         rig.daemon_port, rig.top_url)  # fmt: skip
        after_reach = scene_truth(rig.control_url)
        closed = _session(tmp_path, fk_data_dir, f"{POLICIES}:close_and_stop", seed,
                          rig.daemon_port, rig.top_url)  # fmt: skip
        after_close = scene_truth(rig.control_url)
        miss = _session(tmp_path, fk_data_dir, f"{POLICIES}:let_go_and_go_on", seed,
                        rig.daemon_port, rig.top_url)  # fmt: skip
    finally:
        rig.daemon.stop()
    # 1. j1 asked for 120°: every step bounded (5°), the ones that would take the tip into the
    # mat refused and not sent; the world saw no collision; the trial completed and was judged
    assert reach.status == "completed", reach.reason
    out = reach.outcome
    assert out["stopped_by"] == "policy done" and out["ticks"] == 150
    assert out["refused"] > 0 and out["clamped"] == 150
    assert out["place_verdict"] == "no" and not reach.succeeded
    steps = _steps(reach)
    sent = [tuple(v["sent"]) for v in steps if v["sent"] is not None]
    assert len(sent) + out["refused"] == 150
    assert all(v["refused"].startswith("path check refused") for v in steps if not v["sent"])
    for pose in sent:
        assert check_pose(pose, j1_max=88.0).ok
        assert fk_tip(pose)[1] > 0.0, pose  # the tool tip never below the mat's surface
    assert after_reach["collisions"] == []
    # 2. closed on nothing and ended: the way back opened it where it closed, then HOME
    assert closed.status == "completed", closed.reason
    assert closed.outcome["put_back"] == "yes" and closed.outcome["place_verdict"] == "no"
    assert not after_close["grasped"] and after_close["collisions"] == []
    tr = list(read_trace(closed.trace_path))
    (put,) = [
        e["value"] for e in tr if e["event"] == "decision" and e["kind"] == "rollout_put_back"
    ]
    assert put["opened"] and put["gripper_was"] == 20
    moves = [e["value"]["note"] for e in tr if e["event"] == "decision" and e["kind"] == "arrival"]
    assert moves[-1] == "retreat: home"
    # 3. let go of nothing: the judge looked after the release, saw no block in the box, and
    # the policy went on until it ended the episode itself
    assert miss.status == "completed", miss.reason
    # the policy's 200 calls and the three ticks of the looks, which held the arm
    assert miss.outcome["stopped_by"] == "policy done"
    assert miss.outcome["ticks"] == 200 + LOOKS_PER_RELEASE
    looks = [e["value"] for e in read_trace(miss.trace_path)
             if e["event"] == "decision" and e["kind"] == "rollout_look"]  # fmt: skip
    assert len(looks) == LOOKS_PER_RELEASE  # the block never came: three looks, then none
    assert all(v["verdict"] == "no" and not v["ended"] for v in looks)
    # the looks are inputs of their own kind: the only place verdict is the one at HOME
    verdicts = [(e["kind"], e["stage"]) for e in read_trace(miss.trace_path)
                if e["event"] == "input" and e["kind"] in ("look_verdict", "place_verdict")]  # fmt: skip
    assert verdicts == [("look_verdict", "rollout")] * len(looks) + [
        ("place_verdict", "judge_rollout")
    ]
    # 2 s (20 ticks) after the release at the earliest (the open was asked at tick 70), then
    # at least 2 s apart (the ticks a look takes pass meanwhile)
    assert looks[0]["at_step"] >= 70 + 20
    assert all(b["at_step"] - a["at_step"] >= 20 for a, b in itertools.pairwise(looks))
    # the task's own ledger, verified, with the policy named
    layout = DataRoot(tmp_path / "root", "rollout")
    assert verify_ledger(layout.ledger, RECORDS).ok
    with layout.ledger.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["policy"] for r in rows] == [
        f"{POLICIES}:reach_too_far",
        f"{POLICIES}:close_and_stop",
        f"{POLICIES}:let_go_and_go_on",
    ]


@pytest.mark.slow
@pytest.mark.timeout(600)  # a whole eval session: 160 s beside two more of it, under load
def test_eval_plays_a_recorded_scripted_trial_back_into_the_box_by_the_truth(
    demo_root: Path, tmp_path: Path, fk_data_dir: Path
) -> None:
    """``make run``'s first trial exported, then played back by ``mecharm eval`` on the
    same scene through the whole rig as ``make run`` starts it (recorder on, one session)."""
    with DataRoot(demo_root).ledger.open(encoding="utf-8", newline="") as fh:
        first = next(r for r in csv.DictReader(fh) if r["status"] == "completed")
    ds = tmp_path / "ds"
    rep = export_lerobot(
        demo_root, ds,
        ExportSettings(progress=False, allow_time_scaled=True), runs={first["run_stem"]},
    )  # fmt: skip
    assert [e.run_stem for e in rep.exported] == [first["run_stem"]]
    root = tmp_path / "eval"
    root.mkdir()
    shutil.copytree(fk_data_dir / FK_DIR, root / FK_DIR)  # the table the demo root was given
    summary = tmp_path / "eval.json"
    policy = f"episode:{ds}#0"
    # --max-s: room for a loaded machine (the playback waits for the arm at each frame; one
    # run beside other work used all of the default 180 s just after the release)
    argv = ["eval", policy, "--episodes", "1", "--seed", first["scene_seed"], "--max-s", "900",
            "--data-root", str(root), "--json", str(summary)]  # fmt: skip
    assert mecharm_main(argv) == 0
    d = json.loads(summary.read_text(encoding="utf-8"))
    assert d["episodes"] == 1 and d["stopped"] == 0
    # the world's truth: the block rests in the box, and the judge said so
    assert d["truth"]["in_box"] == 1 and d["truth"]["judge_wrong"] == 0
    assert d["successes"] == 1
    layout = DataRoot(root, "rollout")
    with layout.ledger.open(encoding="utf-8", newline="") as fh:
        (row,) = csv.DictReader(fh)
    assert row["policy"] == policy and row["recording_status"] == "ok"
    assert row["scene_seed"] == first["scene_seed"]
    # the judge looked after the recorded release, once the arm had left the box, and saw
    # the block in the box: the episode ended there, not at the recording's end
    assert row["stopped_by"] == JUDGED_IN_BOX
    trace = list(read_trace(layout.trace(row["run_stem"])))
    looks = [e["value"] for e in trace if e["event"] == "decision" and e["kind"] == "rollout_look"]
    assert looks[-1]["verdict"] == "yes" and looks[-1]["ended"]
    # ... the whole block: where the look found it is where the judge at HOME, the arm out of
    # the way, found it (a look with the arm over the box located a fragment 7-12 mm off)
    seen = {e["kind"]: e["value"]["details"]["frames"] for e in trace
            if e["event"] == "input" and e["kind"] in ("look_verdict", "place_verdict")}  # fmt: skip
    look_xz, home_xz = seen["look_verdict"][0]["block_xz"], seen["place_verdict"][0]["block_xz"]
    assert math.dist(look_xz, home_xz) < 0.003, (look_xz, home_xz)
    # every action went through the safe arm: bounded, guarded, path-checked
    steps = [e["value"] for e in read_trace(layout.trace(row["run_stem"]))
             if e["event"] == "decision" and e["kind"] == "stream_step"]  # fmt: skip
    assert steps and all(v["sent"] is None or check_pose(v["sent"], j1_max=88.0).ok for v in steps)
    # the playback says how many recorded frames the arm never reached
    (played,) = [e["value"] for e in read_trace(layout.trace(row["run_stem"]))
                 if e["event"] == "decision" and e["kind"] == "playback"]  # fmt: skip
    assert isinstance(played["frames_unreached"], int) and played["frames_unreached"] >= 0
    # the summary again from the ledger alone, as on the real rig
    assert mecharm_main(["eval", policy, "--no-run", "--data-root", str(root),
                         "--json", str(tmp_path / "again.json")]) == 0  # fmt: skip
    again = json.loads((tmp_path / "again.json").read_text(encoding="utf-8"))
    assert again["successes"] == 1 and "truth" not in again
