"""A fixed-rate observation → action loop over the safe arm (docs/control-loop.md).

Beside the point-to-point moves the pick-and-place stages make (send, then poll until
arrived), a teleoperator or a learned policy drives the arm by streaming: every tick it
gets an observation (the joints as read, the gripper as last commanded, the newest frame
of each camera, each with its time) and returns an action (six joint targets and,
optionally, a gripper value). This is lerobot's ``get_observation`` / ``send_action``
contract: ``send_action`` returns the action actually sent, after the safety layer cut it.

Every action goes through ``SafeArm.stream``: each joint's change clamped against the
present reading (``max_step_deg`` per tick, never more than ``joint_step_max_deg``), then
the pose guard, the daemon's envelope and the path check; a refused step is not sent and
the arm holds. Ticks keep a fixed schedule (tick ``k`` is due ``k / rate_hz`` after the
start): a tick that overruns makes the loop skip the ticks it missed rather than run late
ones back to back, and the report counts them, so a timeline stamped index / fps never
claims a frame for a moment nothing happened.

A gripper command runs beside the ticks, not inside one: the arm's SDK call holds the
daemon's link for as long as it takes (4 s on the rig profile), and a loop that waited for
it would lose every tick meanwhile. While it holds the link the ticks go on: each
observation repeats the last joint reading (``fresh`` False, its ``t`` the reading's time)
with the cameras' new frames, and each action's joints are held, not sent (the returned
action says so: the pose held); the command's failure ends the loop at the next tick
(docs/control-loop.md, "The gripper beside the ticks").
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from mecharm.cameras.base import CameraSource, Frame
from mecharm.common.gripper import GRIPPER_OPEN_VALUE
from mecharm.common.logging import get_logger
from mecharm.runtime.safe_arm import MotionRefused, SafeArm, StreamStep
from mecharm.runtime.threads import to_thread

__all__ = [
    "GRIPPER_DEADBAND",
    "GRIPPER_KEY",
    "JOINT_KEYS",
    "Action",
    "ControlLoop",
    "LoopReport",
    "Observation",
    "Stop",
    "TickRecord",
]

log = get_logger("mecharm.runtime.control")

#: the loop's rate limits: below 1 Hz it is not a control loop; above 50 Hz one read plus
#: one send over the daemon link (~20-40 ms on the rig) cannot keep up
RATE_MIN_HZ, RATE_MAX_HZ = 1.0, 50.0

#: a gripper value within this of the one last sent is not sent again: each gripper command
#: holds the daemon's link (4 s on the rig profile, docs/control-loop.md), and a policy's
#: continuous gripper output changes a little every tick
GRIPPER_DEADBAND = 5

#: an observation's and an action's names, lerobot's ``<motor>.pos`` with the project's joint
#: names (the robot's features, robot.py; an export's, docs/lerobot.md)
JOINT_KEYS: tuple[str, ...] = tuple(f"j{i}.pos" for i in range(6))
GRIPPER_KEY = "gripper.pos"


@dataclass(frozen=True)
class Observation:
    """What the arm and cameras show at one tick: the joints as read (deg) and when
    (monotonic s), the gripper value last commanded (not read: a serial read more), and each
    camera's newest frame (its capture time is in the frame). ``fresh`` False: a gripper
    command holds the link, the joints are the last reading (taken at ``t``)."""

    step: int
    t: float
    joints: tuple[float, ...]
    gripper: int
    frames: Mapping[str, Frame] = field(default_factory=dict)
    fresh: bool = True


@dataclass(frozen=True)
class Action:
    """Six joint targets (deg) and a gripper value (0 closed … 100 open; None: as it is)."""

    joints: tuple[float, ...]
    gripper: int | None = None


@dataclass(frozen=True)
class TickRecord:
    """One tick as it ran: its index, when it was due and when it sent (s from the start),
    what was wanted and what was sent (None: refused, or ``held`` while a gripper command
    held the link; nothing sent)."""

    step: int
    due_s: float
    sent_s: float
    wanted: tuple[float, ...]
    sent: tuple[float, ...] | None
    clamped: bool
    refused: str | None
    gripper: int
    held: bool = False


@dataclass
class LoopReport:
    """A run of the loop: ticks run, ticks skipped because one overran, refusals, clamps,
    and why it ended."""

    rate_hz: float
    ticks: list[TickRecord] = field(default_factory=list)
    missed: int = 0
    stopped_by: str = ""

    @property
    def refused(self) -> int:
        return sum(t.refused is not None for t in self.ticks)

    @property
    def clamped(self) -> int:
        return sum(t.clamped for t in self.ticks)

    @property
    def held(self) -> int:
        """Ticks whose joints were held while a gripper command held the link."""
        return sum(t.held for t in self.ticks)

    @property
    def achieved_hz(self) -> float:
        """Ticks run per second over the run (the schedule's rate when none overran)."""
        if len(self.ticks) < 2:
            return 0.0
        span = self.ticks[-1].sent_s - self.ticks[0].due_s
        return (len(self.ticks) - 1) / span if span > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "rate_hz": self.rate_hz, "ticks": len(self.ticks), "missed": self.missed,
            "refused": self.refused, "clamped": self.clamped, "held": self.held,
            "achieved_hz": round(self.achieved_hz, 2), "stopped_by": self.stopped_by,
        }  # fmt: skip


#: a policy maps an observation to an action (None: the run is over); it may be async
@dataclass(frozen=True)
class Stop:
    """What a policy returns to end the loop for a reason of its own (None: "policy done")."""

    reason: str


Policy = Callable[[Observation], "Action | Stop | Awaitable[Action | Stop | None] | None"]


class ControlLoop:
    """``get_observation`` / ``send_action`` at ``rate_hz`` over ``arm`` (a ``SafeArm``)."""

    def __init__(
        self,
        arm: SafeArm,
        *,
        rate_hz: float,
        max_step_deg: float,
        cameras: Mapping[str, CameraSource] | None = None,
        into_box: bool = False,
        note: str = "control",
    ) -> None:
        if not (math.isfinite(rate_hz) and RATE_MIN_HZ <= rate_hz <= RATE_MAX_HZ):
            raise ValueError(
                f"rate_hz {rate_hz!r}: give {RATE_MIN_HZ:g}-{RATE_MAX_HZ:g} ticks per second"
            )
        if not (math.isfinite(max_step_deg) and 0 < max_step_deg <= 30):
            raise ValueError(f"max_step_deg {max_step_deg!r}: give more than 0 and at most 30°")
        self.arm = arm
        self.rate_hz = rate_hz
        self.max_step_deg = max_step_deg
        self.cameras = dict(cameras or {})
        self.into_box = into_box
        self.note = note
        self.gripper = GRIPPER_OPEN_VALUE  # as the trial start leaves it: open
        #: the safe arm's account of the last step sent (or refused)
        self.last_step: StreamStep | None = None
        #: the last send_action held the joints: a gripper command held the link
        self.last_held = False
        #: the gripper command under way beside the ticks, its value, and the ticks it held
        self._gripper_job: asyncio.Task[None] | None = None
        self._gripper_value = self.gripper
        self._gripper_held = 0
        #: when the last reading was taken (an observation while the link is held repeats it)
        self._read_t = 0.0

    @property
    def gripper_busy(self) -> bool:
        """A gripper command holds the daemon's link (no reading, no send until it ends)."""
        return self._gripper_job is not None and not self._gripper_job.done()

    def _collect_gripper(self) -> None:
        """The finished gripper command's outcome: the value is the jaws' now; its failure is
        raised here (the value believed stays the more closed one)."""
        job = self._gripper_job
        if job is None or not job.done():
            return
        self._gripper_job = None
        held, self._gripper_held = self._gripper_held, 0
        if job.cancelled():
            raise MotionRefused(f"{self.note}: gripper {self._gripper_value}: cancelled")
        exc = job.exception()
        if exc is not None:
            raise exc
        self.gripper = self._gripper_value
        self.arm.trace.decision(
            "gripper_done", {"note": self.note, "value": self.gripper, "ticks_held": held}
        )

    async def gripper_done(self, *, cancel: bool = False) -> None:
        """Wait until the gripper command under way (if any) ends, and raise its failure;
        ``cancel``: stop waiting for its reply (as a cancelled call would). Shielded: the
        jaws' state is known once it returns, also when the caller is being cancelled."""
        job = self._gripper_job
        if job is None:
            return
        with anyio.CancelScope(shield=True):
            if cancel:
                job.cancel()
            await asyncio.wait([job])
        self._collect_gripper()

    async def refresh(self) -> None:
        """A fresh reading for the step bound, unless a gripper command holds the link."""
        self._collect_gripper()
        if not self.gripper_busy:
            await self.arm.read()
            self._read_t = self.arm.clock.now()

    async def get_observation(self, step: int = 0) -> Observation:
        """The joints (a fresh reading; ``MotionRefused`` when the arm gives none; the last
        one while a gripper command holds the link) and each camera's next frame, read off
        the event loop."""
        self._collect_gripper()
        fresh = not self.gripper_busy
        if fresh:
            joints = await self.arm.read()
            t = self.arm.clock.now()
            self._read_t = t
        else:
            assert self.arm.last_measured is not None  # a command went: a reading came first
            joints, t = self.arm.last_measured, self._read_t
        frames: dict[str, Frame] = {}
        for name, cam in self.cameras.items():
            frames[name] = await to_thread(cam.read)
        return Observation(step, t, joints, self.gripper, frames, fresh=fresh)

    async def send_action(self, action: Action, step: int = 0) -> Action:
        """Send ``action`` through the safe arm; return the action actually sent (a refused
        step: the pose the arm holds, as read). ``last_step`` keeps the safe arm's account.

        The joints go first; the gripper acts only when their step was sent: a step the
        guards refuse holds the arm *and* the jaws (an open over a box the arm never reached
        would drop the block on its wall). A gripper command starts beside the ticks; while
        it holds the link, an action is checked (six finite angles) and held, not sent."""
        self._collect_gripper()
        self.last_held = self.gripper_busy
        if self.last_held:
            self.arm.stream_target(action.joints, f"{self.note} step {step}")
            self._gripper_held += 1
            held = self.arm.last_measured
            assert held is not None  # a command went: a reading came first
            return Action(tuple(held), self.gripper)
        res = await self.arm.stream(
            action.joints, self.max_step_deg, f"{self.note} step {step}", into_box=self.into_box
        )
        self.last_step = res
        if action.gripper is not None and res.sent is not None:
            value = int(action.gripper)
            # a value outside 0-100 goes on to the safe arm, which refuses it; a change within
            # the deadband is not worth a command, except to fully open or closed
            if (
                not 0 <= value <= 100
                or abs(value - self.gripper) > GRIPPER_DEADBAND
                or (value in (0, 100) and value != self.gripper)
            ):
                if not 0 <= value <= 100:  # refused by the safe arm, at once, in this tick
                    await self.arm.gripper_value(value, f"{self.note} step {step}")
                # while the command is under way, and if it fails after reaching the arm (a
                # timeout, a forced stop), believe the more closed of the two: the way back
                # and the operator's question rest on it
                self.gripper = min(self.gripper, value)
                self._gripper_value = value
                self._gripper_job = asyncio.get_running_loop().create_task(
                    self.arm.gripper_value(value, f"{self.note} step {step}"),
                    name=f"{self.note} gripper {value}",
                )
                return Action(res.sent.angles, value)  # the value sent
        if res.sent is not None:
            return Action(res.sent.angles, self.gripper)
        held = self.arm.last_measured
        assert held is not None  # stream() refuses without a reading
        return Action(tuple(held), self.gripper)

    async def run(self, policy: Policy, max_steps: int) -> LoopReport:
        """Run ``policy`` until it returns None or ``max_steps`` ticks are due. A refused
        step lets the loop go on (the arm holds); an error of the arm or link, or an action
        that is not six finite angles, ends it (``stopped_by`` says why) and is raised."""
        if max_steps < 1:
            raise ValueError(f"max_steps {max_steps!r}: give at least 1")
        clock, period = self.arm.clock, 1.0 / self.rate_hz
        report = LoopReport(self.rate_hz)
        t0 = clock.now()
        step = 0
        try:
            while step < max_steps:
                due = t0 + step * period
                await clock.sleep(due - clock.now())
                obs = await self.get_observation(step)
                out = policy(obs)
                action = await out if inspect.isawaitable(out) else out
                if action is None or isinstance(action, Stop):
                    report.stopped_by = "policy done" if action is None else action.reason
                    break
                await self.send_action(action, step)
                now, res = clock.now(), self.last_step
                if self.last_held:  # nothing went: the joints wanted, held
                    wanted = tuple(float(v) for v in action.joints)
                    sent, clamped, refused = None, False, None
                else:
                    assert res is not None
                    wanted, sent = res.wanted, None if res.sent is None else res.sent.angles
                    clamped, refused = res.clamped, res.refused
                report.ticks.append(
                    TickRecord(step, due - t0, now - t0, wanted, sent, clamped, refused,
                               self.gripper, held=self.last_held)
                )  # fmt: skip
                # the next tick that is still ahead: the ones an overrun passed are skipped
                nxt = step + 1
                ahead = math.floor((now - t0) / period) + 1 if now > t0 + nxt * period else nxt
                ahead = min(ahead, max_steps)
                report.missed += max(0, ahead - nxt)
                step = max(ahead, nxt)
            else:
                report.stopped_by = "max_steps"
            await self.gripper_done()  # the loop ends with the jaws' state known
        except BaseException as exc:
            report.stopped_by = f"{type(exc).__name__}: {exc}"
            with contextlib.suppress(Exception):  # the first failure is the one to tell
                await self.gripper_done(cancel=True)
            raise
        finally:
            self.arm.trace.decision("control_loop", report.to_dict())
            log.info("control_loop_end", **report.to_dict())
        return report
