"""Send-and-wait-arrival (docs/runtime.md, "Motion") against the real daemon and the time-scaled SimArm."""

from __future__ import annotations

from typing import Any

import pytest

from mecharm.daemon.protocol import wire_angles
from mecharm.runtime.arm import DaemonArm
from mecharm.runtime.client import ConnectionLost, DaemonClient
from mecharm.runtime.guard import GuardViolation
from mecharm.runtime.motion import (
    MotionAbort,
    MotionPolicy,
    SendRecord,
    arrival_timeout,
    send_and_wait,
)
from mecharm.runtime.ports import Reading, RealClock, Sent, StillClock

from .conftest import TIME_SCALE, SimDaemon

POLICY = MotionPolicy(time_scale=TIME_SCALE)
TARGET = (-31.9, 60.0, -38.3, 18.6, -45.1, -30.0)


def test_arrival_timeout_matches_rig_figures() -> None:
    p = MotionPolicy()
    for delta, expected in ((86.16, 14.9), (71.43, 12.7), (49.67, 9.5), (14.05, 8.0)):
        assert arrival_timeout(delta, p) == pytest.approx(expected, abs=0.05)


async def _arm(d: SimDaemon) -> tuple[DaemonClient, DaemonArm]:
    c = DaemonClient("127.0.0.1", d.port)
    await c.connect()
    await c.set_fresh_mode(1)
    return c, DaemonArm(c, RealClock())


class _Seen:
    """A SendObserver that keeps what it was told, in order (and how many readings came first)."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.readings = 0

    def sent(self, sent: Sent, ts_send: float, attempt: int) -> None:
        self.events.append(("sent", sent, ts_send, attempt, self.readings))

    def settled(self, record: SendRecord) -> None:
        self.events.append(("settled", record))

    def reading(self, _r: Reading) -> None:
        self.readings += 1


@pytest.mark.anyio
async def test_arrives_with_one_send_and_observer(sim_daemon: SimDaemon) -> None:
    c, arm = await _arm(sim_daemon)
    seen = _Seen()
    readings: list[Reading] = []
    res = await send_and_wait(
        arm,
        RealClock(),
        TARGET,
        tol=2.0,
        speed=20,
        policy=POLICY,
        observer=seen,
        on_reading=lambda r: (readings.append(r), seen.reading(r)),
    )
    assert res.arrived and res.attempts == 1 and res.reason == "arrived"
    assert max(abs(a - b) for a, b in zip(res.post or (), TARGET, strict=True)) <= 2.0
    # told at the send, before any poll, with what went on the wire; then told of the arrival
    assert [e[0] for e in seen.events] == ["sent", "settled"]
    _, sent, ts_send, attempt, polls_before = seen.events[0]
    assert sent.angles == tuple(wire_angles(TARGET)) and attempt == 1 and polls_before == 1
    rec = seen.events[1][1]
    assert rec.arrived and rec.ts_arrival is not None and rec.ts_arrival > ts_send == rec.ts_send
    # every reading (start + polls) went to the hook, and there were real polls
    assert len(readings) == 1 + res.sends[0].readings >= 3
    await c.aclose()


@pytest.mark.anyio
async def test_ignored_send_is_resent_exactly_once(sim_daemon: SimDaemon) -> None:
    c, arm = await _arm(sim_daemon)
    sim_daemon.arm.faults.ignore_next_sends(1)
    seen = _Seen()
    res = await send_and_wait(
        arm, RealClock(), TARGET, tol=2.0, speed=20, policy=POLICY, observer=seen
    )
    assert res.arrived and res.attempts == 2 and "re-send" in res.reason
    settled = [e[1] for e in seen.events if e[0] == "settled"]
    assert [e[0] for e in seen.events] == ["sent", "settled", "sent", "settled"]
    assert [(r.attempt, r.arrived) for r in settled] == [(1, False), (2, True)]
    assert settled[0].ts_arrival is None
    await c.aclose()


@pytest.mark.anyio
async def test_never_more_than_one_resend(sim_daemon: SimDaemon) -> None:
    c, arm = await _arm(sim_daemon)
    sim_daemon.arm.faults.ignore_next_sends(5)
    sends_before = sim_daemon.server.stats.snapshot()
    res = await send_and_wait(arm, RealClock(), TARGET, tol=2.0, speed=20, policy=POLICY)
    assert not res.arrived and res.attempts == 2 and "re-send ignored too" in res.reason
    snap = sim_daemon.server.stats.snapshot()
    assert _count(snap, "send_angles") - _count(sends_before, "send_angles") == 2
    await c.aclose()


def _count(snap: dict, cmd: str) -> int:
    cmds = snap.get("commands", {})
    entry = cmds.get(cmd, {})
    return int(entry.get("count", 0)) if isinstance(entry, dict) else int(entry)


@pytest.mark.anyio
async def test_partial_move_is_not_retried(sim_daemon: SimDaemon) -> None:
    c, arm = await _arm(sim_daemon)
    sim_daemon.arm.faults.stall_next_move(0.5)
    res = await send_and_wait(arm, RealClock(), TARGET, tol=2.0, speed=20, policy=POLICY)
    assert not res.arrived and res.attempts == 1
    assert "partial move/stall" in res.reason and "no retry" in res.reason
    await c.aclose()


@pytest.mark.anyio
async def test_no_start_reading_aborts(sim_daemon: SimDaemon) -> None:
    c, arm = await _arm(sim_daemon)
    sim_daemon.arm.faults.fail_reads(1)
    with pytest.raises(MotionAbort, match="no angles readable before the send"):
        await send_and_wait(arm, RealClock(), TARGET, tol=2.0, speed=20, policy=POLICY)
    assert (
        max(
            abs(a - b)
            for a, b in zip(sim_daemon.arm.true_angles(), (0, 0, 0, 0, 0, -30), strict=True)
        )
        < 1
    )
    await c.aclose()


@pytest.mark.anyio
async def test_j1_above_limit_never_reaches_the_daemon(sim_daemon: SimDaemon) -> None:
    c, arm = await _arm(sim_daemon)
    with pytest.raises(GuardViolation, match=r"j1 = 89\.00 above the safety limit 88"):
        await send_and_wait(
            arm, RealClock(), (0, 89.0, 0, 0, 0, -30), tol=2.0, speed=20, policy=POLICY
        )
    assert _count(sim_daemon.server.stats.snapshot(), "send_angles") == 0
    await c.aclose()


@pytest.mark.anyio
async def test_daemon_lost_mid_move_raises_connection_lost(sim_daemon: SimDaemon) -> None:
    import asyncio

    c, arm = await _arm(sim_daemon)

    async def kill_soon() -> None:
        await asyncio.sleep(0.1)
        await sim_daemon.server.stop("killed")

    task = asyncio.create_task(kill_soon())
    with pytest.raises(ConnectionLost):
        await send_and_wait(
            arm, RealClock(), (60, 40, -20, 0, 0, -30), tol=2.0, speed=5, policy=POLICY
        )
    await task
    await c.aclose()


class _LateAnswers:
    """An arm port whose answers come late, as from a busy daemon or link: each reading is
    scripted as (asked, answered, angles); the send completes at t = 0."""

    def __init__(self, start: tuple[float, ...], script: list[tuple[float, float, tuple[float, ...]]]) -> None:  # fmt: skip
        self.readings = [Reading(start, -0.1, t_asked=-0.11)] + [
            Reading(a, t, t_asked=asked) for asked, t, a in script
        ]
        self.asked = 0

    async def read_angles(self) -> Reading:
        self.asked += 1
        return self.readings.pop(0)

    async def send_angles(self, angles: Any, speed: int) -> Sent:
        return Sent(0.0, tuple(angles))


START = (0.0, 0.0, 0.0, 0.0, 0.0, -30.0)
NEAR = tuple(t - 5.0 if i == 0 else t for i, t in enumerate(TARGET))  # 5° short on j0
# a 1.0 s budget for this move: the real-rig seconds of arrival_timeout, scaled down
ONE_S = MotionPolicy(time_scale=arrival_timeout(max(abs(a - b) for a, b in zip(TARGET, START, strict=True)), MotionPolicy()))  # fmt: skip


@pytest.mark.anyio
async def test_a_reading_asked_for_before_the_deadline_and_answered_after_it_does_not_end_the_wait() -> None:  # fmt: skip
    """The arm was short when the late reading was asked for (0.95 s), not when it came
    (1.10 s): the wait asks again, and the arm is there."""
    arm = _LateAnswers(START, [(0.5, 0.6, NEAR), (0.95, 1.10, NEAR), (1.12, 1.13, TARGET)])
    res = await send_and_wait(arm, StillClock(), TARGET, tol=2.0, speed=20, policy=ONE_S)
    assert res.arrived and res.reason == "arrived", res.reason
    assert arm.asked == 4 and not arm.readings


@pytest.mark.anyio
async def test_a_reading_asked_for_after_the_deadline_still_ends_the_wait() -> None:
    arm = _LateAnswers(START, [(0.5, 0.6, NEAR), (1.01, 1.02, NEAR), (1.5, 1.6, TARGET)])
    res = await send_and_wait(arm, StillClock(), TARGET, tol=2.0, speed=20, policy=ONE_S)
    assert not res.arrived and res.reason.startswith("arrival timeout after 1.00s: partial move")
    assert arm.asked == 3  # the reading asked for at 1.01 s was the last


@pytest.mark.anyio
async def test_a_trace_without_asked_times_decides_on_the_answer_times_as_it_was_recorded() -> None:  # fmt: skip
    arm = _LateAnswers(START, [(0.5, 0.6, NEAR), (0.95, 1.10, NEAR), (1.12, 1.13, TARGET)])
    arm.readings = [Reading.from_dict({k: v for k, v in r.to_dict().items() if k != "t_asked"}) for r in arm.readings]  # fmt: skip
    res = await send_and_wait(arm, StillClock(), TARGET, tol=2.0, speed=20, policy=ONE_S)
    assert not res.arrived and arm.asked == 3  # the old rule: the answer at 1.10 s ended it
