"""The fixed-rate control loop (docs/control-loop.md) against the real daemon and the
time-scaled SimArm: streamed steps bounded against each reading, unsafe actions held
before the arm gets there, an honest schedule."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from mecharm.common.kinematics import fk_tip
from mecharm.daemon.backends.sim import SimBackend
from mecharm.daemon.server import run_server
from mecharm.runtime.arm import DaemonArm
from mecharm.runtime.client import DaemonClient, DaemonTimeout
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.control import Action, ControlLoop, Observation, Stop
from mecharm.runtime.ports import RealClock
from mecharm.runtime.recorder_link import RecorderLink
from mecharm.runtime.records.trace import TraceWriter
from mecharm.runtime.safe_arm import MotionRefused, SafeArm
from mecharm.sim.arm import SimArm, SimArmConfig

from .conftest import SimDaemon, trial_settings

HOME = (0.0, 0.0, 0.0, 0.0, 0.0, -30.0)
#: above a block on the mat (ee_y ~87 mm), as the pick hover is
HOVER = (-35.5, 67.5, -42.87, 17.5, -10.98, -30.0)
STEP = 4.0


@asynccontextmanager
async def _safe_arm_on(port: int, tmp_path: Path) -> AsyncIterator[SafeArm]:
    """A safe arm over a daemon client on ``port``: fresh mode 1, a first reading taken."""
    client = DaemonClient("127.0.0.1", port, request_timeout=2.0)
    await client.connect()
    await client.set_fresh_mode(1)
    clock = RealClock()
    s: RuntimeSettings = trial_settings(tmp_path, tmp_path)
    arm = SafeArm(
        s, DaemonArm(client, clock), clock, TraceWriter(tmp_path / "trace.jsonl"),
        RecorderLink(None), where=lambda: "control",
    )  # fmt: skip
    await arm.read()
    try:
        yield arm
    finally:
        await client.aclose()


@asynccontextmanager
async def _gripper_held_for(
    seconds: float, tmp_path: Path
) -> AsyncIterator[tuple[SimArm, SafeArm]]:
    """A daemon whose gripper call holds the link ``seconds`` (the rig's 20 s of the arm's
    time at the matching time scale), and a safe arm on it."""
    arm = SimArm(
        SimArmConfig(time_scale=20.0 / seconds, seed=3, initial_angles=HOME, gripper_command_s=20.0)
    )
    async with (
        run_server(SimBackend(arm), "127.0.0.1", 0, shutdown_grace_s=0.5) as server,
        _safe_arm_on(server.port, tmp_path) as safe,
    ):
        yield arm, safe


@pytest.fixture
async def safe(sim_daemon: SimDaemon, tmp_path: Path) -> AsyncIterator[SafeArm]:
    async with _safe_arm_on(sim_daemon.port, tmp_path) as arm:
        yield arm


def _decisions(arm: SafeArm, kind: str) -> list[dict[str, Any]]:
    return [e["value"] for e in arm.trace.lines if e.get("kind") == kind]


@pytest.mark.slow
@pytest.mark.anyio
async def test_each_streamed_step_is_bounded_against_the_reading_and_the_arm_follows(
    safe: SafeArm,
) -> None:
    seen: dict[int, Observation] = {}

    def sway(obs: Observation) -> Action:
        seen[obs.step] = obs
        j0 = 25.0 * math.sin(obs.step / 6.0)
        return Action((j0, *HOME[1:]))

    loop = ControlLoop(safe, rate_hz=20.0, max_step_deg=STEP)
    report = await loop.run(sway, max_steps=40)
    assert report.stopped_by == "max_steps"
    assert len(report.ticks) + report.missed == 40 and report.refused == 0
    for t in report.ticks:
        assert t.sent is not None
        before = seen[t.step].joints
        assert max(abs(a - b) for a, b in zip(t.sent, before, strict=True)) <= STEP + 0.011
        assert t.sent_s >= t.due_s == pytest.approx(t.step / 20.0)
    assert report.clamped > 0  # a 25° sway at 20 Hz asks more than 4° per tick at times
    # the arm followed the stream: it ends near the last pose sent
    await anyio.sleep(0.3)
    last = report.ticks[-1].sent
    assert last is not None
    now = await safe.read()
    assert abs(now[0] - last[0]) < 3.0
    (summary,) = _decisions(safe, "control_loop")
    assert summary["ticks"] == len(report.ticks) and summary["stopped_by"] == "max_steps"
    assert len(_decisions(safe, "stream_step")) == len(report.ticks)


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_policy_asking_past_j1_max_is_stopped_at_it(
    safe: SafeArm, sim_daemon: SimDaemon
) -> None:
    """A target past a joint's limit is aimed at the limit (``SafeArm.joint_box``), never
    beyond: each step clamped, none past ``j1_max``, the true arm within its settle noise."""
    # folded (the tool stays well above the mat whatever j1 does), then j1 asked past j1_max
    folded = (0.0, 0.0, -90.0, 0.0, -60.0, -30.0)
    await safe.move(folded, 2.0, "fold")
    true_j1: list[float] = []

    def reach(obs: Observation) -> Action:
        true_j1.append(float(sim_daemon.arm.true_angles()[1]))
        return Action((0.0, 120.0, -90.0, 0.0, -60.0, -30.0))

    report = await ControlLoop(safe, rate_hz=20.0, max_step_deg=STEP).run(reach, max_steps=40)
    j1_max = safe.settings.arm.j1_max
    sent = [t.sent for t in report.ticks if t.sent is not None]
    assert sent and all(p[1] <= j1_max for p in sent)
    assert report.clamped == len(report.ticks)  # every step asked past the limit
    assert sent[-1][1] == pytest.approx(j1_max)  # ... and the last ones at it
    assert max(true_j1) <= j1_max + 1.0  # the simulated arm's own settle noise, no more
    assert max(true_j1) > j1_max - 2 * STEP  # it did go as far as it safely could


@pytest.mark.anyio
async def test_a_policy_driving_the_tool_into_the_mat_is_refused_before_the_mat(
    safe: SafeArm,
) -> None:
    await safe.move(HOVER, 2.0, "to the hover")
    into_mat = (-35.5, 88.0, -20.0, 17.5, -10.98, -30.0)
    assert float(fk_tip(into_mat)[1]) < 0.0  # the target is below the mat's surface
    report = await ControlLoop(safe, rate_hz=20.0, max_step_deg=STEP).run(
        lambda obs: Action(into_mat), max_steps=30
    )
    sent = [t.sent for t in report.ticks if t.sent is not None]
    margin = safe.settings.arm.path_mat_margin_m
    assert sent and all(float(fk_tip(p)[1]) >= margin for p in sent)
    assert report.refused > 0
    assert any("path check" in (t.refused or "") for t in report.ticks)
    # a refused step holds the jaws too: an open asked with it is not sent
    before = len(_decisions(safe, "gripper"))
    loop = ControlLoop(safe, rate_hz=20.0, max_step_deg=STEP)
    loop.gripper = 20  # as if closed on a block
    out = await loop.send_action(Action(into_mat, 100))
    assert loop.last_step is not None and loop.last_step.refused
    assert out.gripper == 20 and len(_decisions(safe, "gripper")) == before
    with pytest.raises(MotionRefused):  # not six finite angles: nothing at all is sent
        await loop.send_action(Action((math.nan,) * 6, 100))
    assert len(_decisions(safe, "gripper")) == before


@pytest.mark.anyio
async def test_a_streamed_step_s_path_is_checked_from_the_step_sent_last_too(
    safe: SafeArm, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A streamed arm may not have reached the last step when the next goes: the firmware
    then moves from where it is toward the newest target, so the path from the last sent
    step is checked as well as the one from the reading (the real check, watched; made to
    refuse only the path from the last step sent)."""
    import mecharm.runtime.safe_arm as sa

    real, starts = sa.check_path, []

    def watched(start: Any, target: Any, *a: Any, **k: Any) -> Any:
        starts.append(tuple(start))
        v = real(start, target, *a, **k)
        if tuple(start) == first_sent[0]:  # the path from the step sent last
            return type(v)(False, "blocked (test)", v.samples)
        return v

    first_sent: list[tuple[float, ...]] = [()]
    await safe.read()
    step1 = await safe.stream((HOME[0] + 4.0, *HOME[1:]), STEP, "one")
    assert step1.sent is not None
    first_sent[0] = tuple(step1.sent.angles)
    monkeypatch.setattr(sa, "check_path", watched)
    # no new reading: the reference is still the one before step one, 4° short of it
    assert safe.last_measured is not None and safe.last_measured != first_sent[0]
    step2 = await safe.stream((HOME[0] + 8.0, *HOME[1:]), STEP, "two")
    assert starts == [safe.last_measured, first_sent[0]]  # from the reading, then the last sent
    assert step2.sent is None and "from the step sent last" in (step2.refused or "")
    assert safe.last_streamed == first_sent[0]  # a refused step leaves the last one sent
    # a point-to-point move supersedes the streamed target: no second check after it
    monkeypatch.setattr(sa, "check_path", real)
    await safe.move(HOME, 2.0, "home")
    assert safe.last_streamed is None


@pytest.mark.anyio
async def test_an_action_that_is_not_six_finite_angles_ends_the_loop_saying_so(
    safe: SafeArm,
) -> None:
    calls: list[int] = []

    def broken(obs: Observation) -> Action:
        # the fourth call, whichever tick it falls on: a loaded machine may skip one
        calls.append(obs.step)
        return Action((0.0, math.nan, 0.0, 0.0, 0.0, -30.0) if len(calls) == 4 else HOME)

    loop = ControlLoop(safe, rate_hz=20.0, max_step_deg=STEP)
    with pytest.raises(MotionRefused, match="not six finite angles"):
        await loop.run(broken, max_steps=10)
    (summary,) = _decisions(safe, "control_loop")
    assert "not six finite angles" in summary["stopped_by"] and summary["ticks"] == 3
    with pytest.raises(MotionRefused, match="not six finite"):
        await loop.send_action(Action((0.0, 0.0, 0.0)))


@pytest.mark.anyio
async def test_an_overrun_skips_the_ticks_it_missed_and_counts_them(safe: SafeArm) -> None:
    calls: list[int] = []  # the step of each call of the policy

    async def slow_once(obs: Observation) -> Action | None:
        calls.append(obs.step)
        if len(calls) == 3:
            await anyio.sleep(0.35)  # 3.5 ticks at 10 Hz (more on a loaded machine)
        # done on the sixth call, whichever steps the calls fell on: a loaded machine skips more
        return None if len(calls) > 5 else Action(HOME)

    report = await ControlLoop(safe, rate_hz=10.0, max_step_deg=STEP).run(slow_once, 30)
    assert [t.step for t in report.ticks] == calls[:5]  # the sixth said done: no tick
    assert calls[3] >= calls[2] + 4  # the overrun's 3.5 ticks were skipped, not run late
    assert report.missed == calls[-1] - (len(calls) - 1)  # every step without a call
    assert report.stopped_by == "policy done"
    for t in report.ticks:  # every tick ran at or after its due time, never early
        assert t.sent_s >= t.due_s == pytest.approx(t.step / 10.0)


@pytest.mark.anyio
async def test_the_gripper_is_sent_when_it_changes_and_a_bad_value_is_refused(
    safe: SafeArm,
) -> None:
    loop = ControlLoop(safe, rate_hz=20.0, max_step_deg=STEP)
    report = await loop.run(lambda obs: Action(HOME, 40 if obs.step >= 2 else None), 6)
    grips = _decisions(safe, "gripper")
    assert [g["value"] for g in grips] == [40]  # once, when it changed
    assert report.ticks[-1].gripper == 40
    with pytest.raises(MotionRefused, match="not in 0-100"):
        await loop.send_action(Action(HOME, 150))
    with pytest.raises(MotionRefused, match="not in 0-100"):
        await loop.send_action(Action(HOME, 101))  # out of range even within the deadband
    # a policy's continuous gripper output: small changes are not sent (each command holds
    # the daemon), the value held is what send_action says was sent; the ends always go
    sent = []
    for v in (43, 36, 30, 98, 100):
        sent.append((await loop.send_action(Action(HOME, v))).gripper)
        await loop.gripper_done()  # each command ends before the next action (see below)
    assert sent == [40, 40, 30, 98, 100]
    assert [g["value"] for g in _decisions(safe, "gripper")] == [40, 30, 98, 100]


@pytest.mark.anyio
async def test_a_policy_ends_the_loop_with_a_reason_of_its_own(safe: SafeArm) -> None:
    loop = ControlLoop(safe, rate_hz=20.0, max_step_deg=STEP)
    report = await loop.run(lambda obs: Stop("enough") if obs.step == 3 else Action(HOME), 10)
    assert report.stopped_by == "enough" and len(report.ticks) + report.missed == 3
    (summary,) = _decisions(safe, "control_loop")
    assert summary["stopped_by"] == "enough"


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"rate_hz": 0.2, "max_step_deg": 4.0}, "rate_hz"),
        ({"rate_hz": math.inf, "max_step_deg": 4.0}, "rate_hz"),
        ({"rate_hz": 10.0, "max_step_deg": 0.0}, "max_step_deg"),
        ({"rate_hz": 10.0, "max_step_deg": 45.0}, "max_step_deg"),
    ],
)
def test_a_loop_with_a_bad_rate_or_step_is_refused_naming_it(
    kw: dict[str, float], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ControlLoop(object(), **kw)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_a_gripper_command_runs_beside_the_ticks_which_hold_the_joints_meanwhile(
    tmp_path: Path,
) -> None:
    """The rig's gripper call holds the daemon's link for seconds (here 2 s): the ticks go
    on meanwhile, each observation repeating the last reading (``fresh`` False) and each
    action's joints held, not sent; then the value is the jaws' and the stream resumes."""
    async with _gripper_held_for(2.0, tmp_path) as (arm, safe):  # forty ticks at 20 Hz
        seen: list[Observation] = []

        def close_then_sway(obs: Observation) -> Action | None:
            seen.append(obs)
            stale = [o for o in seen if not o.fresh]
            if stale and obs.fresh and obs.step >= stale[-1].step + 3:
                return None  # three fresh ticks after the command ended
            j0 = 3.0 * math.sin(len(seen) / 3.0)  # a small sway: every step within the bound
            return Action((j0, *HOME[1:]), 20 if len(seen) == 3 else None)

        loop = ControlLoop(safe, rate_hz=20.0, max_step_deg=STEP)
        report = await loop.run(close_then_sway, max_steps=2000)
    assert report.stopped_by == "policy done"
    held = [t for t in report.ticks if t.held]
    assert held and report.held == len(held)
    assert all(t.sent is None and t.refused is None for t in held)  # held, not refused
    # each stale observation repeats the reading taken before the command: joints and time
    stale = [o for o in seen if not o.fresh]
    assert stale
    before = [o for o in seen if o.fresh and o.step < stale[0].step][-1]
    assert all(o.joints == before.joints and o.t == before.t for o in stale)
    assert all(o.gripper == 20 for o in stale)  # believed closed while it closes
    # nothing reached the daemon while the link was held: one stream step per sent tick
    sent_ticks = [t for t in report.ticks if not t.held]
    assert len(_decisions(safe, "stream_step")) == len(sent_ticks)
    (done,) = _decisions(safe, "gripper_done")
    assert done["value"] == 20 and done["ticks_held"] == len(held)
    assert [g["value"] for g in _decisions(safe, "gripper")] == [20]
    assert loop.gripper == 20 and report.ticks[-1].gripper == 20
    (summary,) = _decisions(safe, "control_loop")
    assert summary["held"] == len(held)
    assert arm.true_gripper() == pytest.approx(20.0, abs=1.0)  # the jaws did close


@pytest.mark.anyio
async def test_a_gripper_command_that_fails_beside_the_ticks_ends_the_loop_naming_it(
    tmp_path: Path,
) -> None:
    """A gripper command whose reply never comes in time (here 2 s, the arm's call holding
    4 s): its failure is not lost in its task: the next tick raises it, the loop ends
    saying so, and the jaws are believed the more closed way."""
    async with _gripper_held_for(4.0, tmp_path) as (_arm, safe):
        calls: list[Observation] = []

        def close_once(obs: Observation) -> Action:
            calls.append(obs)
            return Action(HOME, 20 if len(calls) == 3 else None)

        loop = ControlLoop(safe, rate_hz=20.0, max_step_deg=STEP)
        with (
            pytest.raises(DaemonTimeout, match="set_gripper_value"),
            pytest.MonkeyPatch.context() as mp,
        ):
            mp.setattr("mecharm.runtime.client.GRIPPER_TIMEOUT_S", 2.0)
            await loop.run(close_once, max_steps=4000)
    (summary,) = _decisions(safe, "control_loop")
    assert summary["stopped_by"].startswith("DaemonTimeout")
    assert any(not o.fresh for o in calls)  # the ticks went on while it was under way
    assert loop.gripper == 20  # believed closed: the jaws may have closed
    assert not _decisions(safe, "gripper_done")
