"""The arm as every task must use it: each motion through the guard, the envelope, the
joint-continuity bound, the path check and the rig's arrival policy (docs/safety.md).

Why one class: the safety of a motion must not depend on which task or stage asks for
it. A stage names what it wants (a target, a tolerance, whether the tool is at the work
or enters the box); ``SafeArm`` decides whether the arm may go there, traces every
decision (guard verdict, motion checks, command, arrival) and tells the recorder of each
send and arrival. It knows no task: the stage's name for messages and the box for the
path check come in as callables. It also keeps where the arm is, as best known — the last
pose commanded and arrived at, and the last pose read — which the continuity bound, the
path check and the exit path start from.

A refusal or a move that did not arrive raises ``MotionRefused`` naming the stage and
why; the stage driver (engine.py) ends the stage with that reason (docs/stages.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mecharm.common.envelope import Envelope
from mecharm.common.gripper import GRIPPER_OPEN_VALUE
from mecharm.common.kinematics import JOINT_MAX, JOINT_MIN
from mecharm.common.logging import get_logger
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.guard import check_pose
from mecharm.runtime.motion import (
    MotionAbort,
    MotionPolicy,
    MoveResult,
    SendRecord,
    send_and_wait,
    wait_at_rest,
)
from mecharm.runtime.pathcheck import Workspace, check_path
from mecharm.runtime.perception.config import DEFAULT_CONFIG, PerceptionConfig
from mecharm.runtime.ports import ArmPort, Clock, Reading, Sent
from mecharm.runtime.recorder_link import RecorderLink
from mecharm.runtime.records.trace import TraceWriter

__all__ = ["MotionRefused", "SafeArm", "StreamStep"]

log = get_logger("mecharm.runtime.safe_arm")

#: the settings this module reads (docs/settings.md, "What each stage reads"; a test
#: checks it against the code)
SETTINGS_READ: frozenset[str] = frozenset({
    "motion.arrival_base_s", "motion.arrival_min_s", "motion.arrival_per_deg_s", "arm.gripper_close_value",
    "arm.gripper_settle_s", "arm.gripper_speed", "motion.ignored_move_deg", "arm.j1_max",
    "arm.joint_step_max_deg", "arm.path_box_margin_m", "arm.path_mat_margin_m", "arm.path_sample_deg",
    "motion.poll_interval_s", "motion.rest_eps_deg", "motion.rest_max_polls", "motion.rest_poll_s", "motion.send_wait_s",
    "arm.speed", "arm.stream_speed"
})  # fmt: skip


@dataclass(frozen=True)
class StreamStep:
    """One streamed step: what was wanted, what went on the wire (None: refused, nothing
    sent), whether the step bound cut it, and the refusal."""

    wanted: tuple[float, ...]
    sent: Sent | None
    clamped: bool
    refused: str | None


class MotionRefused(RuntimeError):
    """A motion the safe arm refused (guard, continuity bound, path check) or that did not
    arrive, or angles that could not be read; the message is the stage's abort reason."""


@dataclass
class SafeArm:
    """The arm port behind every safeguard; ``where()`` names the asking stage in messages,
    ``box_xz()`` is the box as the task detected it (None: not yet), for the path check."""

    settings: RuntimeSettings
    arm: ArmPort
    clock: Clock
    trace: TraceWriter
    recorder: RecorderLink
    where: Callable[[], str]
    box_xz: Callable[[], tuple[float, float] | None] = lambda: None
    #: the daemon's safety envelope as the trial started (None: none announced); every guard
    #: verdict keeps to the narrower of it and the settings (docs/daemon.md, "Safety envelope")
    envelope: Envelope | None = None
    #: box geometry for the path check; the runtime's ``perception:`` config
    workcell: PerceptionConfig = DEFAULT_CONFIG
    #: the last pose commanded (and arrived at) and the last pose read: the references of the
    #: joint-continuity bound and the start of the path check
    last_commanded: tuple[float, ...] | None = None
    last_measured: tuple[float, ...] | None = None
    #: the last streamed step sent (None after a point-to-point move): a streamed arm may still
    #: be on its way there when the next step goes, so that step's path is checked from it too
    last_streamed: tuple[float, ...] | None = None
    #: moves sent and arrived-or-not (each a guarded command)
    moves: int = field(default=0)

    @property
    def policy(self) -> MotionPolicy:
        s = self.settings
        return MotionPolicy(
            arrival_min_s=s.motion.arrival_min_s, arrival_base_s=s.motion.arrival_base_s,
            arrival_per_deg_s=s.motion.arrival_per_deg_s, ignored_move_deg=s.motion.ignored_move_deg,
            send_wait_s=s.motion.send_wait_s, poll_interval_s=s.motion.poll_interval_s, time_scale=s.scale,
        )  # fmt: skip

    def pose(self) -> tuple[float, ...] | None:
        """Where the arm is, as best known: the last pose it arrived at, else the last read."""
        return self.last_commanded if self.last_commanded is not None else self.last_measured

    async def sleep(self, real_rig_seconds: float) -> None:
        await self.clock.sleep(self.settings.scaled(real_rig_seconds))

    async def read(self) -> tuple[float, ...]:
        r = await self.arm.read_angles()
        self.measured(r)
        if r.angles is None:
            raise MotionRefused(f"{self.where()}: no angles readable: {r.error}")
        return r.angles

    async def at_rest(self, note: str) -> None:
        """Wait until the arm has stopped settling before a camera measures (traced, not fatal)."""
        s = self.settings
        res = await wait_at_rest(
            self.arm,
            self.clock,
            eps_deg=s.motion.rest_eps_deg,
            poll_s=s.scaled(s.motion.rest_poll_s),
            max_polls=s.motion.rest_max_polls,
            on_reading=self.measured,
        )
        self.trace.decision("at_rest", {"note": note, **res.to_dict()})
        if not res.at_rest:
            log.warning(
                "not_at_rest", stage=self.where(), note=note, last_delta_deg=res.last_delta_deg
            )

    def measured(self, r: Reading) -> None:
        """A reading taken (by a move's polling, a rest wait, a read): the recorder hears it."""
        if r.angles is not None:
            self.last_measured = tuple(r.angles)
            self.recorder.measured(r.angles)

    async def move(
        self,
        target: Sequence[float],
        tol: float,
        note: str,
        *,
        lookup_ok: bool | None = None,
        lookup_reason: str = "",
        near_work: bool = False,
        into_box: bool = False,
    ) -> MoveResult:
        """Guard, motion checks, then send-and-wait. Raises MotionRefused when the guard or a
        motion check refuses or the arm does not arrive.

        ``near_work`` marks a move with the tool at the work (descents, lifts, servo and
        depth steps, the retreat from the box): its joint changes are bounded by
        ``joint_step_max_deg``. ``into_box`` lets the path enter the box's opening (placing).
        """
        s = self.settings
        where = self.where()
        verdict = check_pose(
            target,
            j1_max=s.arm.j1_max,
            lookup_ok=lookup_ok,
            lookup_reason=lookup_reason,
            envelope=self.envelope,
        )
        self.trace.decision("guard", {"note": note, **verdict.to_dict()})
        if not verdict.ok:
            raise MotionRefused(f"{where}: guard refused {note}: {verdict.reason}")
        tgt = verdict.angles
        checks, refusal = self.motion_checks(tgt, near_work=near_work, into_box=into_box)
        if checks:
            self.trace.decision("motion_check", {"note": note, **checks})
        if refusal is not None:
            log.warning("motion_refused", stage=where, note=note, reason=refusal)
            raise MotionRefused(f"{where}: {refusal} ({note})")
        self.trace.decision(
            "command", {"note": note, "angles": tgt, "speed": s.arm.speed, "tol": tol}
        )
        observer = (
            _RecorderObserver(self.recorder, s.arm.speed, f"{where}:{note}")
            if self.recorder.enabled
            else None
        )
        self.last_streamed = None  # a point-to-point move supersedes any streamed target
        try:
            res = await send_and_wait(
                self.arm,
                self.clock,
                tgt,
                tol=tol,
                speed=s.arm.speed,
                policy=self.policy,
                observer=observer,
                on_reading=self.measured if observer else None,
            )
        except MotionAbort as exc:
            raise MotionRefused(f"{where}: {exc}") from None
        self.moves += 1
        self.trace.decision(
            "arrival",
            {"note": note, "arrived": res.arrived, "attempts": res.attempts, "reason": res.reason},
        )
        self.trace.log("move", {"note": note, **res.to_dict()})
        if res.post is not None:
            self.last_measured = tuple(res.post)
        if not res.arrived:
            self.last_commanded = None  # where it stopped is known only from the readings
            raise MotionRefused(f"{where}: {note}: {res.reason}")
        self.last_commanded = tgt
        return res

    def stream_target(self, target: Sequence[float], note: str) -> tuple[float, ...]:
        """A streamed target as six finite angles, else ``MotionRefused`` naming it (also
        the check of an action the control loop holds while a gripper command runs)."""
        want = tuple(float(v) for v in target)
        if len(want) != 6 or not all(math.isfinite(v) for v in want):
            raise MotionRefused(f"{self.where()}: {note}: not six finite angles: {list(target)}")
        return want

    async def stream(
        self, target: Sequence[float], max_step_deg: float, note: str, *, into_box: bool = False
    ) -> StreamStep:
        """One step of a streamed motion (a fixed-rate control loop, control.py): no arrival
        wait, the next step follows from the next reading.

        From the last reading, each joint's change is clamped to ``max_step_deg`` (lerobot's
        ``max_relative_target``); the clamped pose then passes the guard (joint limits,
        ``j1_max``, the daemon's envelope) and the path check from the arm's pose. A pose
        they refuse is not sent: the arm holds, and the step says why. Without a reading
        nothing is sent (``MotionRefused``): a streamed step is only ever relative to a
        measured pose (docs/safety.md, "Streamed motion").
        """
        present = self.last_measured
        if present is None:
            raise MotionRefused(f"{self.where()}: {note}: no reading to step from")
        want = self.stream_target(target, note)
        bound = min(max_step_deg, self.settings.arm.joint_step_max_deg or max_step_deg)
        lo, hi = self.joint_box()
        # a target past a joint's limit is aimed at the limit (a measured pose replayed can
        # lie a hair past j1_max where the command was at it), then bounded per step
        step = tuple(
            p + max(-bound, min(bound, min(max(w, a), b) - p))
            for w, p, a, b in zip(want, present, lo, hi, strict=True)
        )
        clamped = any(abs(a - b) > 1e-9 for a, b in zip(step, want, strict=True))
        s = self.settings
        verdict = check_pose(step, j1_max=s.arm.j1_max, envelope=self.envelope)
        refusal = None if verdict.ok else f"guard: {verdict.reason}"
        path: dict[str, Any] | None = None
        if refusal is None:  # the path check from the reading (the bound was applied above)
            checks, refusal = self.motion_checks(verdict.angles, near_work=False, into_box=into_box)
            path = checks.get("path")
        prev = self.last_streamed
        if refusal is None and prev is not None and prev != present:
            # ... and from the step sent last: the arm may not have reached it yet, and the
            # firmware goes from where it is toward the newest target (fresh mode)
            v = check_path(
                prev, verdict.angles, self.workspace(), into_box=into_box,
                step_deg=s.arm.path_sample_deg,
            )  # fmt: skip
            if not v.ok:
                refusal = f"path check refused (from the step sent last): {v.reason}"
                path = {"from_last_sent": True, "into_box": into_box, **v.to_dict()}
        if refusal is not None:
            self.trace.decision(
                "stream_step",
                {"note": note, "wanted": list(want), "clamped": clamped, "sent": None,
                 "refused": refusal, "path": path},
            )  # fmt: skip
            return StreamStep(want, None, clamped, refusal)
        ts_send = self.clock.wall()
        sent = await self.arm.send_angles(verdict.angles, s.arm.stream_speed)
        # streamed: commanded, never waited for; the next reference is the next reading
        self.last_commanded = None
        self.last_streamed = tuple(sent.angles)
        self.moves += 1
        self.recorder.commanded(
            sent.angles, s.arm.stream_speed, ts_send, 1, f"{self.where()}:{note}"
        )
        self.trace.decision(
            "stream_step",
            {"note": note, "wanted": list(want), "clamped": clamped, "sent": list(sent.angles),
             "refused": None},
        )  # fmt: skip
        return StreamStep(want, sent, clamped, None)

    def joint_box(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """Each joint's limits for a streamed target: the SDK's, ``arm.j1_max`` and the
        daemon's envelope, the narrowest of them."""
        lo, hi = list(JOINT_MIN), list(JOINT_MAX)
        hi[1] = min(hi[1], self.settings.arm.j1_max)
        if self.envelope is not None:
            lo = [max(a, b) for a, b in zip(lo, self.envelope.joint_min, strict=True)]
            hi = [min(a, b) for a, b in zip(hi, self.envelope.joint_max, strict=True)]
        return tuple(lo), tuple(hi)

    async def retrace(
        self, waypoints: Sequence[Sequence[float]], tol: float, note: str, *, into_box: bool = True
    ) -> None:
        """Go to ``waypoints[-1]`` along the way the arm came (``waypoints``, in the order to go),
        skipping every waypoint a single move can pass within ``joint_step_max_deg``.

        Out of the box and back in: the servo and depth steps may together have turned a joint
        more than the bound from the place approach, each of them within it, so the way back
        is the way in (docs/safety.md, "Joint continuity"). Usually this is one move. The
        pick servo's steps are retraced the same way (``into_box`` False: the path check keeps
        the tool out of the box).
        """
        bound = self.settings.arm.joint_step_max_deg
        pts = [tuple(float(v) for v in w) for w in waypoints]
        cur = self.pose()
        i = 0
        while i < len(pts):
            j = len(pts) - 1
            if bound > 0 and cur is not None:
                while j > i and max(abs(a - b) for a, b in zip(pts[j], cur, strict=True)) > bound:
                    j -= 1
            last = j == len(pts) - 1
            await self.move(
                pts[j], tol, note if last else f"{note} (by way of {j + 1}/{len(pts)})",
                lookup_ok=True, near_work=True, into_box=into_box,
            )  # fmt: skip
            cur, i = pts[j], j + 1

    def workspace(self) -> Workspace:
        """The mat and, once detected, the box, as the path check sees them."""
        s, w = self.settings, self.workcell
        return Workspace(
            mat_margin_m=s.arm.path_mat_margin_m,
            box_xz=self.box_xz(),
            box_inner_m=w.box_inner_m,
            box_wall_m=w.box_wall_m,
            box_height_m=w.box_height_m,
            box_margin_m=s.arm.path_box_margin_m,
        )

    def motion_checks(
        self, target: Sequence[float], *, near_work: bool, into_box: bool
    ) -> tuple[dict[str, Any], str | None]:
        """The joint-continuity bound (near-work moves) and the path check (every move)
        of a move to ``target`` from where the arm is (docs/safety.md).

        Returns (what was checked, for the trace; the refusal reason or None). Empty
        when both checks are off, so traces of runs without them are unchanged.
        """
        s = self.settings
        out: dict[str, Any] = {}
        refusal: str | None = None
        bound = s.arm.joint_step_max_deg
        if bound > 0 and near_work:
            ref = self.pose()
            if ref is None:
                out["joint_step"] = {"ok": True, "why": "no reference pose yet"}
            else:
                jumps = [t - r for t, r in zip(target, ref, strict=True)]
                j = max(range(6), key=lambda i: abs(jumps[i]))
                ok = abs(jumps[j]) <= bound
                src = "commanded" if ref is self.last_commanded else "measured"
                out["joint_step"] = {
                    "ok": ok, "ref": list(ref), "ref_source": src, "joint": j,
                    "jump_deg": jumps[j], "bound_deg": bound,
                }  # fmt: skip
                if not ok:
                    refusal = (
                        f"joint step refused: j{j} {jumps[j]:+.1f}° from the last {src} pose "
                        f"> joint_step_max_deg {bound:g}°"
                    )
        start = self.last_measured if self.last_measured is not None else self.last_commanded
        if start is None:
            out["path"] = {"ok": True, "reason": "no start pose yet"}
        else:
            v = check_path(
                start, target, self.workspace(), into_box=into_box, step_deg=s.arm.path_sample_deg
            )
            out["path"] = {"into_box": into_box, **v.to_dict()}
            if not v.ok and refusal is None:
                refusal = f"path check refused: {v.reason}"
        return out, refusal

    async def gripper_value(self, value: int, note: str) -> None:
        """A streamed gripper command (0 closed … 100 open): sent, traced, told to the
        recorder, with no settle wait (the control loop's next tick follows)."""
        if not 0 <= value <= 100:
            raise MotionRefused(f"{self.where()}: {note}: gripper value {value} not in 0-100")
        # the recorder hears it as it goes: the jaws move while the SDK call holds (below)
        self.recorder.gripper(value, f"{self.where()}:value: {note}")
        await self.arm.set_gripper_value(value, self.settings.arm.gripper_speed)
        self.trace.decision("gripper", {"action": "value", "note": note, "value": value})

    async def gripper(self, action: str, note: str) -> None:
        """Open (``set_gripper_state(0)``) or close (``set_gripper_value``); the recorder gets
        the value sent; then the rig's settle time.

        The recorder hears the command as it goes on the wire, before the call returns: the
        rig's SDK call holds for seconds (4 s on the rig profile) while the jaws already move,
        so a recording stamps the gripper where the arm stood still for it (a replay then
        acts where the trial did; docs/lerobot.md, "observation.state gripper")."""
        s = self.settings
        value = GRIPPER_OPEN_VALUE if action == "open" else s.arm.gripper_close_value
        self.recorder.gripper(value, f"{self.where()}:{action}: {note}")
        if action == "open":
            await self.arm.set_gripper_state(0, s.arm.speed)
        else:
            await self.arm.set_gripper_value(s.arm.gripper_close_value, s.arm.gripper_speed)
        self.trace.decision("gripper", {"action": action, "note": note, "value": value})
        await self.sleep(s.arm.gripper_settle_s)


@dataclass
class _RecorderObserver:
    """Tells the recorder of each send as it goes on the wire, and of its arrival."""

    recorder: RecorderLink
    speed: int
    note: str

    def sent(self, sent: Sent, ts_send: float, attempt: int) -> None:
        self.recorder.commanded(sent.angles, self.speed, ts_send, attempt, self.note)

    def settled(self, record: SendRecord) -> None:
        self.recorder.arrival(
            record.ts_send, record.ts_arrival, record.attempt, record.arrived, self.note
        )
