"""The second task, lift and return, end to end and in its parts (docs/tasks.md).

End to end it runs as pick-and-place does: the simulated rig's daemon and workcell and the
recorder as real processes, the runtime in-process through the same rig set-up, and the
world's truth (``/scene/truth``) says whether the block is back where it was.
"""

from __future__ import annotations

import asyncio
import csv
import json
import math
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from mecharm.common.config import load_settings
from mecharm.common.layout import DataRoot
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.lift_return import RECORDS, TASK, Stage
from mecharm.runtime.lift_return.body import put_back_down
from mecharm.runtime.pick_place import TASK as PICK_PLACE
from mecharm.runtime.records.ledger import verify_ledger
from mecharm.runtime.records.trace import read_trace
from mecharm.runtime.rigsetup import open_rig
from mecharm.runtime.simcontrol import scene_next
from mecharm.runtime.tasks import TASKS, get_task
from mecharm.runtime.trial import TrialSummary, run_trial
from mecharm.tools.cli import main as mecharm_main
from mecharm.tools.export.config import ExportSettings
from mecharm.tools.export.lerobot import DatasetError, export_lerobot
from mecharm.tools.export.verify import verify_dataset
from mecharm.tools.report import cli as report_cli
from mecharm.tools.simrig import SimRig, start_recorder, start_sim_daemon
from tests.runtime.offline_ctx import offline_context
from tests.tools.test_view import read_rrd

SCALE = 20.0


def _truth(rig: SimRig) -> dict[str, Any]:
    with urllib.request.urlopen(rig.control_url + "/scene/truth", timeout=10) as resp:
        return json.loads(resp.read())  # type: ignore[no-any-return]


@pytest.mark.slow
def test_a_lifted_block_is_back_where_it_was_by_the_truth_and_on_the_task_s_books(
    tmp_path: Path, fk_data_dir: Path
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    seed = 11201  # a scene no other test tunes on
    rig = start_sim_daemon(tmp_path / "logs", seed=seed, time_scale=SCALE)
    rec, udp = start_recorder(tmp_path / "logs", root, "synthetic?fps=15&w=640&h=360")
    try:
        scene_next(rig.control_url, seed)
        before = _truth(rig)["block"]
        settings = load_settings(
            RuntimeSettings,
            overrides={
                "task": "lift_return", "data_root": root, "fk_data_dir": fk_data_dir,
                "daemon_port": rig.daemon_port, "top_camera": rig.top_url,
                "recorder_port": udp, "time_scale": SCALE, "release_side_check": False,
                # the rig's 8 s arrival minimum is 0.4 s at x20: too tight on a loaded machine
                "arrival_min_s": 20.0,
            },
        )  # fmt: skip

        async def one() -> TrialSummary:
            async with open_rig(settings) as (r, _client):
                return await run_trial(r, scene_seed=seed)

        t = asyncio.run(one())
        after = _truth(rig)
    finally:
        rec.stop()
        rig.daemon.stop()
    assert t.status == "completed", t.reason
    assert t.task == "lift_return" and t.succeeded and t.verdicts == "pick yes return yes"
    # the truth: on the mat, upright, where it was; nothing hit on the way
    moved_true = 1000 * math.hypot(
        after["block"]["x"] - before["x"], after["block"]["z"] - before["z"]
    )
    assert after["block"]["resting_on"] == "mat" and not after["grasped"]
    assert moved_true < 25.0, moved_true
    assert after["collisions"] == []
    # the runtime's own measure agrees with the truth within the detection's scatter
    assert abs(t.outcome["moved_mm"] - moved_true) < 10.0, (t.outcome, moved_true)
    # the task's folder, ledger and recording; pick-and-place's are untouched
    layout = DataRoot(root, "lift_return")
    assert t.run_dir.parent == layout.run_folders
    assert not DataRoot(root).ledger.exists() and not DataRoot(root).run_folders.exists()
    rep = verify_ledger(layout.ledger, RECORDS)
    assert rep.ok, rep.errors
    with layout.ledger.open(encoding="utf-8", newline="") as fh:
        (row,) = csv.DictReader(fh)
    assert row["return_verdict"] == "yes" and row["pick_verdict"] == "yes"
    assert row["recording_status"] == "ok"
    assert row["recording_path"] == str(DataRoot.recording_rel(t.run_stem, "lift_return"))
    assert layout.recording(t.run_stem).meta.is_file()
    stages = [e["frm"] for e in read_trace(t.trace_path) if e["event"] == "transition"]
    assert stages[-2:] == [Stage.PUT_BACK_DOWN, Stage.JUDGE_RETURN]
    _exported_and_reported(root, tmp_path / "dataset", t)
    # replay re-drives the task the trace names, through the same stages: the same decisions
    assert mecharm_main(["replay", str(t.trace_path), "--data-dir", str(fk_data_dir)]) == 0
    # the viewer shows its verdicts, the return's among them
    from mecharm.tools.view.build import build as view_build  # imports rerun: only here

    code, _summary = view_build(t.run_dir, tmp_path / "trial.rrd")
    assert code == 0, _summary
    _rows, texts = read_rrd(tmp_path / "trial.rrd")
    assert any(x.startswith("return_verdict:") for x in texts["/events/verdicts"])


def _exported_and_reported(root: Path, out: Path, t: TrialSummary) -> None:
    """The exporter and the report take the task's trials as they take pick-and-place's:
    its ledger, its success rule, its verdicts as the episodes' fields."""
    settings = ExportSettings(
        trials_of="lift_return",
        progress=False,
        allow_synthetic=True,  # the test card above
        allow_time_scaled=True,  # the simulated rig at its time scale
    )
    rep = export_lerobot(root, out, settings)
    assert [e.run_stem for e in rep.exported] == [t.run_stem] and rep.exported[0].success
    assert verify_dataset(out).ok
    info = json.loads((out / "meta" / "info.json").read_text(encoding="utf-8"))
    ours = [k for k in info["features"] if k.startswith("mecharm.")]
    assert ours == ["mecharm.run_stem", "mecharm.rig_id", "mecharm.pick_verdict",
                    "mecharm.return_verdict", "mecharm.judge", "mecharm.recording_status"]  # fmt: skip
    (episodes,) = (out / "meta" / "episodes").glob("*/*.parquet")
    row = pq.read_table(episodes).to_pylist()[0]
    assert row["mecharm/return_verdict"] == "yes" and row["mecharm/success"] is True
    assert row["tasks"] == ["lift the red block and put it back where it was"]
    # a pick-and-place export of the same dataset folder is refused: other columns
    with pytest.raises(DatasetError, match="holds trials of task lift_return"):
        export_lerobot(
            root, out, ExportSettings(progress=False, allow_synthetic=True, allow_time_scaled=True)
        )
    assert report_cli.run(root, task="lift_return") == 0
    page = DataRoot(root, "lift_return").report.read_text(encoding="utf-8")
    assert (
        "return yes" in page
        and "Success = status completed, pick verdict yes and return verdict yes" in page
    )


def test_the_registry_names_each_task_once_with_its_own_records() -> None:
    assert list(TASKS) == ["pick_place", "lift_return", "rollout"]
    assert get_task("lift_return") is TASK and get_task("pick_place") is PICK_PLACE
    assert TASK.records.ledger_columns != PICK_PLACE.records.ledger_columns
    with pytest.raises(ValueError, match="did you mean 'lift_return'"):
        get_task("lift_retrun")


def test_every_stage_of_the_table_has_a_body_and_every_way_ends() -> None:
    reached = {TASK.first}
    frontier = [TASK.first]
    while frontier:
        stage = frontier.pop()
        for (frm, _outcome), to in TASK.transitions.items():
            if frm == stage and to not in reached:
                reached.add(to)
                frontier.append(to)
    assert TASK.done in reached
    assert {s for s in Stage if s not in (Stage.DONE, Stage.ABORT)} == set(TASK.bodies)


def _scene(stage: str, xz: list[float]) -> dict[str, Any]:
    return {
        "event": "input",
        "kind": "scene",
        "stage": stage,
        "value": {"ok": True, "block_xz": xz},
    }


def test_the_records_come_from_the_trace_the_last_detect_and_the_verdict() -> None:
    lines = [
        _scene("detect", [0.10, 0.20]),
        {"event": "input", "kind": "pick_verdict", "value": {"verdict": "no"}},
        _scene("detect", [0.12, 0.21]),  # the retry's detect: where the block is now
        {"event": "input", "kind": "pick_verdict", "value": {"verdict": "yes"}},
        _scene("judge_return", [0.2, 0.3]),  # the return check's look is not where it was
        {"event": "decision", "kind": "return_verdict",
         "value": {"verdict": "no", "moved_mm": 40.2, "from_xz": [0.12, 0.21]}},
    ]  # fmt: skip
    got = RECORDS.outcome(lines)
    assert got == {"pick_verdict": "yes", "pick_attempts": 2, "return_verdict": "no",
                   "moved_mm": 40.2, "block_x": 0.12, "block_z": 0.21}  # fmt: skip
    assert not RECORDS.succeeded(got) and RECORDS.succeeded({**got, "return_verdict": "yes"})
    # a trial cut before the return: empty verdict, no distance
    cut = RECORDS.outcome(lines[:2])
    assert cut["return_verdict"] == "" and cut["moved_mm"] is None
    assert RECORDS.describe(cut) == "pick no return -"


# ---------------------------------------------------------------- where it moves the arm
POSES = {
    "approach": (-30.0, 60.0, -10.0, 3.6, -55.0, -30.0),
    "pick": (-30.0, 75.0, -25.0, 3.6, -60.0, -30.0),
    "servo": (-31.0, 76.0, -26.0, 3.6, -61.0, -30.0),
}


async def _return(tmp_path: Path, path: list[tuple[float, ...]], hover: bool) -> list[Any]:
    """put_back_down after a lift, every motion recorded (target or waypoints, and the
    gripper) instead of sent: the safe arm's own guards are tested in tests/runtime."""
    ctx = offline_context(RuntimeSettings(data_root=tmp_path), (-0.199, 0.173))
    did: list[Any] = []

    async def move(target: Any, tol: float, note: str, **kw: Any) -> None:
        did.append(("move", tuple(target), note))

    async def retrace(waypoints: Any, tol: float, note: str, **kw: Any) -> None:
        did.extend(("move", tuple(w), note) for w in waypoints)

    async def gripper(action: str, note: str) -> None:
        did.append(("gripper", action, note))

    ctx.safe.move, ctx.safe.retrace, ctx.safe.gripper = move, retrace, gripper  # type: ignore[method-assign]
    st = ctx.state
    st.pick_approach, st.pick_pose, st.pick_hover = POSES["approach"], path[-1], hover
    st.pick_path, st.holding = list(path), True
    await put_back_down(ctx)
    assert not st.holding
    return did


@pytest.mark.anyio
@pytest.mark.parametrize("servo", [False, True])
@pytest.mark.parametrize("hover", [False, True])
async def test_the_block_goes_back_down_only_through_poses_the_pick_made(
    tmp_path: Path, servo: bool, hover: bool
) -> None:
    path = [POSES["pick"], POSES["servo"]] if servo else [POSES["pick"]]
    did = await _return(tmp_path, path, hover)
    made = {POSES["approach"], *path}
    moves = [d[1] for d in did if d[0] == "move"]
    assert moves and set(moves) <= made  # nowhere the pick did not go with this block
    opened = did.index(("gripper", "open", "return: on the mat"))
    # opened where it was grasped (the last pose of the pick path), then up again
    assert moves.index(path[-1]) < opened and did[opened - 1][1] == path[-1]
    assert did[-1][0] == "move" and did[-1][1] == POSES["approach"]


def test_the_console_expects_the_session_task_s_own_stage_times(tmp_path: Path) -> None:
    """The console knows no task: its nominal times are the task's (docs/console.md)."""
    import io

    from mecharm.runtime.service import session_console

    pick = session_console(RuntimeSettings(data_root=tmp_path), io.StringIO())
    back = session_console(RuntimeSettings(data_root=tmp_path, task="lift_return"), io.StringIO())
    assert "judge_return" not in pick.nominal_s and pick.nominal_s["return_home"] == 7.0
    assert (
        back.nominal_s["judge_return"] > 0 and back.nominal_s["detect"] == pick.nominal_s["detect"]
    )
    assert {"put_back_down", "judge_return"} <= set(back.nominal_s)
