"""Every fault of the simulated rig, armed from outside through ``POST /faults``
(docs/simulation-faults.md), under a real runtime trial against a real sim daemon
process: what the runtime does is written in each test.

The daemon (and its workcell) is one process for the module, time-scaled 20x; each
test clears the faults, lays out scene 7 again and runs one trial. A fault meant for
the middle of a trial is armed from ``on_stage`` when the named stage ends. The crash
test has its own daemon (it dies).
"""

from __future__ import annotations

import asyncio
import json
import signal
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mecharm.common.config import load_settings
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.records.trace import read_trace
from mecharm.runtime.rigsetup import open_rig
from mecharm.runtime.simcontrol import scene_next
from mecharm.runtime.trial import TrialSummary, run_trial
from mecharm.tools.simrig import SimRig, start_sim_daemon

#: whole trials against the simulated rig as processes (`make test-fast` skips them)
pytestmark = pytest.mark.slow

SCALE = 20.0
SEED = 7


def _call(rig: SimRig, method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(rig.control_url + path, data=data, method=method)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def _fault(rig: SimRig, spec: dict[str, Any]) -> None:
    _call(rig, "POST", "/faults", spec)


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimRig]:
    r = start_sim_daemon(tmp_path_factory.mktemp("faults") / "logs", seed=SEED, time_scale=SCALE)
    yield r
    r.daemon.stop()


@pytest.fixture
def fresh(rig: SimRig) -> SimRig:
    """No fault armed, scene 7 laid out again (the block back on the mat)."""
    _call(rig, "DELETE", "/faults")
    scene_next(rig.control_url, SEED)
    return rig


def _settings(tmp_path: Path, fk: Path, rig: SimRig, **kw: Any) -> RuntimeSettings:
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    return load_settings(
        RuntimeSettings,
        # no recorder, no side frame: the top camera decides
        overrides=rig.runtime_overrides(
            root, SCALE, fk_data_dir=fk, release_side_check=False, **kw
        ),
    )


def _trial(
    tmp_path: Path,
    fk: Path,
    rig: SimRig,
    at_stage: str | None = None,
    spec: dict[str, Any] | None = None,
    **kw: Any,
) -> TrialSummary:
    """One trial; ``spec`` armed before it (``at_stage`` None) or when ``at_stage`` first ends."""
    armed: list[str] = []

    def on_stage(stage: str, outcome: str, reason: str) -> None:
        if spec is not None and stage == at_stage and not armed:
            _fault(rig, spec)
            armed.append(stage)

    if spec is not None and at_stage is None:
        _fault(rig, spec)
        armed.append("before")

    async def go() -> TrialSummary:
        async with open_rig(_settings(tmp_path, fk, rig, **kw)) as (trial_rig, _client):
            return await run_trial(trial_rig, scene_seed=SEED, on_stage=on_stage)

    summary = asyncio.run(go())
    assert spec is None or armed, f"the trial never reached {at_stage}: {summary.reason}"
    print(f"{(spec or {}).get('fault')}: {summary.status} | {summary.reason}")
    return summary


def _decisions(t: TrialSummary, kind: str) -> list[dict[str, Any]]:
    return [
        e["value"]
        for e in read_trace(t.trace_path)
        if e["event"] == "decision" and e.get("kind") == kind
    ]


def _counts(rig: SimRig) -> dict[str, int]:
    return _call(rig, "GET", "/faults")["arm"]["counts"]  # type: ignore[no-any-return]


def _top(rig: SimRig) -> dict[str, Any]:
    return _call(rig, "GET", "/faults")["cameras"]["top"]  # type: ignore[no-any-return]


def _events(rig: SimRig) -> list[dict[str, Any]]:
    return _call(rig, "GET", "/scene/truth")["events"]  # type: ignore[no-any-return]


# ---------------------------------------------------------------- the arm's firmware
def test_ignored_send_is_resent_once_and_the_trial_completes(
    fresh: SimRig, tmp_path: Path, fk_data_dir: Path
) -> None:
    before = _counts(fresh)["ignored_sends"]
    t = _trial(tmp_path, fk_data_dir, fresh, None, {"fault": "ignore_sends", "n": 1})
    assert t.status == "completed", t.reason
    assert _counts(fresh)["ignored_sends"] == before + 1
    resent = [a for a in _decisions(t, "arrival") if a["attempts"] == 2]
    assert len(resent) == 1 and "first send ignored" in resent[0]["reason"], resent


def test_stall_stops_the_stage_as_a_partial_move(
    fresh: SimRig, tmp_path: Path, fk_data_dir: Path
) -> None:
    t = _trial(tmp_path, fk_data_dir, fresh, "detect", {"fault": "stall", "at_fraction": 0.5})
    assert t.status == "stopped"
    assert t.reason.startswith("approach_pick:") and "partial move/stall" in t.reason, t.reason
    assert t.outcome["pick_attempts"] == 0


def test_settle_error_beyond_the_tolerance_stops_the_stage_naming_the_distance(
    fresh: SimRig, tmp_path: Path, fk_data_dir: Path
) -> None:
    """j0 ends 4° off (tolerance 2°): the arm stopped short of the target, the runtime says so."""
    t = _trial(
        tmp_path, fk_data_dir, fresh, "detect", {"fault": "settle_error", "deg": [4, 0, 0, 0, 0, 0]}
    )
    assert t.status == "stopped"
    assert t.reason.startswith("approach_pick:") and "from target" in t.reason, t.reason


def test_read_latency_spike_within_the_timeout_is_waited_out_beyond_it_stops(
    fresh: SimRig, tmp_path: Path, fk_data_dir: Path
) -> None:
    spikes = _counts(fresh)["latency_spikes"]
    # 10 s of sim time = 0.5 s real at 20x: under the 4 s request timeout
    ok = _trial(
        tmp_path,
        fk_data_dir,
        fresh,
        "detect",
        {"fault": "read_latency_spike", "seconds": 10, "n": 3},
    )
    assert ok.status == "completed", ok.reason
    assert _counts(fresh)["latency_spikes"] == spikes + 3
    # 40 s of sim time = 2 s real: past a 1 s request timeout
    scene_next(fresh.control_url, SEED)
    slow = _trial(
        tmp_path,
        fk_data_dir,
        fresh,
        "detect",
        {"fault": "read_latency_spike", "seconds": 40, "n": 1},
        request_timeout_s=1.0,
    )
    assert slow.status == "stopped"
    assert "daemon timeout: no reply to get_angles within 1.00s" in slow.reason, slow.reason


def test_a_read_failure_before_a_send_stops_the_stage_no_blind_send(
    fresh: SimRig, tmp_path: Path, fk_data_dir: Path
) -> None:
    t = _trial(tmp_path, fk_data_dir, fresh, "detect", {"fault": "read_failures", "n": 1})
    assert t.status == "stopped"
    assert "no angles readable before the send" in t.reason and "arm_no_reply" in t.reason, t.reason


# ---------------------------------------------------------------- the cameras
def test_camera_lost_fails_detect_naming_the_camera(
    fresh: SimRig, tmp_path: Path, fk_data_dir: Path
) -> None:
    t = _trial(
        tmp_path, fk_data_dir, fresh, "open_gripper_home", {"fault": "camera_lost", "camera": "top"}
    )
    assert t.status == "stopped"
    assert t.reason.startswith("detect:") and "top.mjpg: 30 consecutive failed reads" in t.reason
    assert t.outcome["pick_attempts"] == 0


def test_frozen_feed_after_the_grasp_stops_without_judging_and_keeps_the_block(
    fresh: SimRig, tmp_path: Path, fk_data_dir: Path
) -> None:
    """The in-process run of the issue judged three picks "no" from a frozen picture and stopped
    with the block held; now the judge never sees the stale frames."""
    t = _trial(tmp_path, fk_data_dir, fresh, "grasp", {"fault": "frozen_feed", "camera": "top"})
    assert t.status == "stopped"
    assert t.reason.startswith("lift_and_judge:") and "feed frozen" in t.reason, t.reason
    assert (
        t.outcome["pick_verdict"] == "" and t.outcome["pick_attempts"] == 1
    )  # no verdict from a stale image
    assert t.held  # never released blind: held in the hover for the operator
    truth = _call(fresh, "GET", "/scene/truth")
    assert truth["grasped"] is True
    assert _top(fresh)["frozen_frames"] >= 10


def test_dropped_frames_slow_the_capture_but_the_trial_completes(
    fresh: SimRig, tmp_path: Path, fk_data_dir: Path
) -> None:
    t = _trial(tmp_path, fk_data_dir, fresh, None, {"fault": "drop_frames", "fraction": 0.5})
    assert t.status == "completed", t.reason
    assert _top(fresh)["dropped_frames"] > 10


def test_late_frames_within_the_settle_time_the_trial_completes(
    fresh: SimRig, tmp_path: Path, fk_data_dir: Path
) -> None:
    """0.02 s late at 20x is 0.4 s late on the rig's clock, well inside the settle time.
    (Frames 0.5 s late here, 10 s of the rig's clock, are judged as if live: three "no"
    verdicts; docs/simulation-faults.md. 0.05 s was too near that edge on a loaded machine:
    the delay is real time, the rig's clock runs 20x.)"""
    t = _trial(tmp_path, fk_data_dir, fresh, None, {"fault": "late_frames", "delay_s": 0.02})
    assert t.status == "completed", t.reason
    assert _top(fresh)["late_frames"] > 10


# ---------------------------------------------------------------- the world
def test_block_knocked_after_detect_the_pick_misses_then_redetects_and_succeeds(
    fresh: SimRig, tmp_path: Path, fk_data_dir: Path
) -> None:
    t = _trial(tmp_path, fk_data_dir, fresh, "detect", {"fault": "knock", "dx_m": 0.03, "dz_m": 0})
    assert t.status == "completed", t.reason
    assert t.outcome["pick_attempts"] == 2 and t.outcome["pick_verdict"] == "yes"
    kinds = [e["kind"] for e in _events(fresh)]
    assert kinds.index("knock") < kinds.index("miss") < kinds.index("grasp"), kinds


def test_box_pushed_before_the_release_is_found_there_and_the_block_goes_in(
    fresh: SimRig, tmp_path: Path, fk_data_dir: Path
) -> None:
    """The box slides 20 mm after the place servo: the release check finds it where it is now,
    re-aims at it, and the block lands in it (the simulator's truth says so)."""
    t = _trial(
        tmp_path, fk_data_dir, fresh, "servo_place", {"fault": "push_box", "dx_m": -0.02, "dz_m": 0}
    )
    checks = _decisions(t, "release_check")
    views = [
        e["value"]
        for e in read_trace(t.trace_path)
        if e["event"] == "input" and e.get("kind") == "release_view"
    ]
    assert views[0]["box_refound"] and views[0]["box_moved_mm"] > 10.0, views[0]
    assert t.status == "completed" and checks[-1]["confirmed"], t.reason
    truth = _call(fresh, "GET", "/scene/truth")
    assert truth["place_outcome"] == "box" and t.outcome["place_verdict"] == "yes"


def test_box_pushed_far_before_the_release_is_refused_naming_it_and_put_back(
    fresh: SimRig, tmp_path: Path, fk_data_dir: Path
) -> None:
    """The box slides 120 mm (as the arm pushed it on `harsh`): the top camera finds it far
    from where detect saw it; the block is not over its opening, the release is refused for
    that reason (not released over where the box used to be), and the block goes back to the
    mat; the world agrees: not in the box, not in the jaws."""
    t = _trial(
        tmp_path,
        fk_data_dir,
        fresh,
        "servo_place",
        {"fault": "push_box", "dx_m": 0.0, "dz_m": 0.12},
    )
    checks = _decisions(t, "release_check")
    assert not any(c["confirmed"] for c in checks), checks
    assert t.status == "stopped" and t.reason.startswith("release refused:"), t.reason
    assert "from where detect saw it" in t.reason, t.reason
    assert t.reason.endswith("; the block was put back on the mat") and not t.held
    truth = _call(fresh, "GET", "/scene/truth")
    assert truth["place_outcome"] != "box" and not truth["grasped"]
    assert truth["block"]["resting_on"] == "mat"


def test_missed_grasp_is_judged_no_then_the_retry_succeeds(
    fresh: SimRig, tmp_path: Path, fk_data_dir: Path
) -> None:
    t = _trial(tmp_path, fk_data_dir, fresh, None, {"fault": "missed_grasp"})
    assert t.status == "completed", t.reason
    assert t.outcome["pick_attempts"] == 2 and t.outcome["pick_verdict"] == "yes"
    misses = [e for e in _events(fresh) if e["kind"] == "miss"]
    assert len(misses) == 1 and "forced miss" in misses[0]["reason"]


def test_lighting_change_mid_trial_still_detects_and_judges(
    fresh: SimRig, tmp_path: Path, fk_data_dir: Path
) -> None:
    """Darkest the scene schema allows, after detect: the pick and place judges still see."""
    t = _trial(
        tmp_path, fk_data_dir, fresh, "detect", {"fault": "lighting", "gain": 0.8, "flicker": 0.05}
    )
    assert t.status == "completed", t.reason
    assert t.outcome["pick_verdict"] == "yes" and t.outcome["place_verdict"] == "yes"
    assert _call(fresh, "GET", "/scene/truth")["layout"]["lighting"]["gain"] == 0.8


# ---------------------------------------------------------------- the daemon process
def test_daemon_crash_mid_trial_aborts_naming_it_and_writes_the_run_log(
    tmp_path: Path, fk_data_dir: Path
) -> None:
    own = start_sim_daemon(tmp_path / "logs", seed=SEED, time_scale=SCALE)
    try:
        t = _trial(tmp_path, fk_data_dir, own, "approach_pick", {"fault": "crash", "after_s": 0.05})
        own.daemon.proc.wait(10)
        assert own.daemon.proc.returncode == -signal.SIGKILL  # died as kill -9 would
    finally:
        own.daemon.stop()
    assert t.status == "stopped"
    assert "daemon connection lost" in t.reason, t.reason
    runlog = json.loads((t.run_dir / f"{t.run_stem}.json").read_text())
    assert runlog["result"]["status"] == "stopped"
    assert "daemon connection lost" in runlog["result"]["reason"]
    assert runlog["exit"] == [{"step": "arm actions skipped", "why": "daemon connection lost"}]
