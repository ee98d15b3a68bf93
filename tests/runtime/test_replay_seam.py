"""The replay seam: a trace's inputs, fed back into the same stage machine with no arm and no
camera, reproduce every decision (what `mecharm replay` builds on)."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from mecharm.common.config import load_settings
from mecharm.runtime.arm import DaemonArm
from mecharm.runtime.client import DaemonClient
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.engine import run_stages
from mecharm.runtime.lookup import ensure_table, load_arc, load_table
from mecharm.runtime.memories import CorrectionMemory, HeightMemory
from mecharm.runtime.pick_place import TASK, TrialContext
from mecharm.runtime.ports import (
    Reading,
    ReleaseView,
    SceneObservation,
    Sent,
    StillClock,
    TipObservation,
    VerdictObservation,
)
from mecharm.runtime.recorder_link import RecorderLink
from mecharm.runtime.records.trace import DECISION_EVENTS, TraceWriter, read_trace
from mecharm.runtime.trial import Rig, run_trial

from .conftest import TIME_SCALE, SimDaemon
from .stand_ins import TrueStateEyes


class _Inputs:
    def __init__(self, trace: list[dict[str, Any]]) -> None:
        self.q = deque(e for e in trace if e["event"] == "input")

    def take(self, kind: str) -> Any:
        e = self.q.popleft()
        assert e["kind"] == kind, f"replay expected input {kind}, trace has {e['kind']}"
        return e["value"]


class ReplayArm:
    def __init__(self, inputs: _Inputs) -> None:
        self.inputs = inputs

    async def read_angles(self) -> Reading:
        return Reading.from_dict(self.inputs.take("angles"))

    async def send_angles(self, angles: Sequence[float], speed: int) -> Sent:
        return Sent.from_dict(self.inputs.take("sent"))

    async def set_gripper_state(self, state: int, speed: int) -> None: ...
    async def set_gripper_value(self, value: int, speed: int) -> None: ...
    async def set_fresh_mode(self, mode: int) -> None: ...
    async def stop(self) -> None: ...


class ReplayEyes:
    def __init__(self, inputs: _Inputs) -> None:
        self.inputs = inputs

    def start_trial(self, run_dir: Path | None) -> None: ...

    async def observe_scene(self, tag: str) -> SceneObservation:
        return SceneObservation.from_dict(self.inputs.take("scene"))

    async def measure_tip(self, block_xz: Any, tip_height_m: float, tag: str) -> TipObservation:
        return TipObservation.from_dict(self.inputs.take("tip"))

    async def locate_block(
        self, lift_m: float, near_xz: Any, tag: str
    ) -> tuple[float, float] | None:
        v = self.inputs.take("block_xz")
        return None if v is None else (v[0], v[1])

    async def judge_pick(self, tip_height_m: float, tag: str) -> VerdictObservation:
        return VerdictObservation.from_dict(self.inputs.take("pick_verdict"))

    async def judge_place(self, side_frame: str | None, tag: str) -> VerdictObservation:
        return VerdictObservation.from_dict(self.inputs.take("place_verdict"))

    async def view_release(
        self, lift_m: float, box_xz: Any, side_frame: str | None, tag: str
    ) -> ReleaseView:
        return ReleaseView.from_dict(self.inputs.take("release_view"))

    async def ask_release(self, why: str, tag: str) -> VerdictObservation:
        return VerdictObservation.from_dict(self.inputs.take("release_answer"))

    async def close(self) -> None: ...


class ReplayLink(RecorderLink):
    def __init__(self, inputs: _Inputs) -> None:
        super().__init__(None)
        self.inputs = inputs

    async def side_frame(self, tag: str) -> tuple[str | None, float | None, str]:
        p, ts, reason = self.inputs.take("side_frame")
        return p, ts, reason


def _strip(e: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in e.items() if k not in ("seq", "ts")}


@pytest.mark.slow
@pytest.mark.anyio
async def test_trace_replays_to_identical_decisions(
    sim_daemon: SimDaemon, tmp_path: Path, fk_data_dir: Path
) -> None:
    s = load_settings(
        RuntimeSettings,
        overrides={
            "data_root": tmp_path,
            "fk_data_dir": fk_data_dir,
            "time_scale": TIME_SCALE,
            "recorder_enabled": False,
        },
    )
    sim_daemon.arm.faults.ignore_next_sends(1)  # make the recorded run take the re-send branch too
    client = DaemonClient("127.0.0.1", sim_daemon.port)
    await client.connect()
    from mecharm.runtime.ports import RealClock

    clock = RealClock()
    table = load_table(ensure_table(fk_data_dir))
    arcs = load_arc(s.pick_place.approach_pick_arc), load_arc(s.pick_place.approach_place_arc)
    rig = Rig(
        s,
        DaemonArm(client, clock),
        TrueStateEyes(sim_daemon.arm, (0.21, 0.25), (-0.19, 0.2), fail_picks=1),
        RecorderLink(None),
        clock,
        table,
        *arcs,
        arm_alive=lambda: client.is_connected,
    )
    t = await run_trial(rig)
    await client.aclose()
    assert t.status == "completed" and t.outcome["pick_attempts"] >= 2, t.reason
    recorded = list(read_trace(t.trace_path))

    inputs = _Inputs(recorded)
    assert inputs.take("table_checksum") == table.checksum
    mem = inputs.take("memories")
    corrections = CorrectionMemory(tmp_path / "replay" / "c.json")
    corrections.entries = dict(mem["correction"])
    heights = HeightMemory(tmp_path / "replay" / "h.json")
    heights.entries = dict(mem["height"])
    replay_trace = TraceWriter(None)
    ctx = TrialContext(
        settings=s,
        arm=ReplayArm(inputs),
        eyes=ReplayEyes(inputs),
        recorder=ReplayLink(inputs),
        clock=StillClock(),
        trace=replay_trace,
        table=table,
        arc_pick=arcs[0],
        arc_place=arcs[1],
        corrections=corrections,
        heights=heights,
    )
    _last, reason = await run_stages(TASK, ctx)
    replay_trace.result("completed" if reason == "" else "stopped", reason)
    assert not inputs.q  # every recorded input consumed, in order

    def decisions(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            _strip(e) for e in lines if e["event"] in DECISION_EVENTS and e.get("stage") != "end"
        ]

    got = [d for d in decisions(replay_trace.lines) if d["event"] != "result"]
    want = [d for d in decisions(recorded) if d["event"] != "result"]
    assert got == want
    assert recorded[-1]["status"] == replay_trace.lines[-1]["status"] == "completed"
