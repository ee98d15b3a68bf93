"""The rollout's own stage bodies and its way out after a stop (docs/rollouts.md).

The policy drives the arm only through the control loop (control.py), so every one of its
actions is a streamed step of the safe arm: bounded against the present reading, then the
pose guard, the daemon's envelope and the path check; a refused step is not sent. After
the policy, the runtime takes the arm back *the way it came*: back along the poses the
rollout sent, each of them a pose the arm already reached, until the tip is clear above
the mat and the box, then HOME. A gripper the policy left closed is opened where the
policy closed it (the block, if it holds one, goes back where it was picked), never at a
random place and never carried HOME; then the place judge says where the block is.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import numpy as np

from mecharm.cameras.base import CameraSource
from mecharm.common.gripper import GRIPPER_OPEN_VALUE
from mecharm.common.kinematics import fk_frames, fk_tip
from mecharm.common.logging import get_logger
from mecharm.runtime.control import (
    RATE_MAX_HZ,
    RATE_MIN_HZ,
    Action,
    ControlLoop,
    LoopReport,
    Observation,
    Stop,
)
from mecharm.runtime.engine import Attempt, Outcome, StageFailed, exit_attempts
from mecharm.runtime.pick_place import TrialContext
from mecharm.runtime.ports import VerdictObservation
from mecharm.runtime.rollout.policies import PolicyError, RolloutPolicy, load_policy
from mecharm.runtime.rollout.stages import Stage
from mecharm.runtime.threads import to_thread

__all__ = [
    "CLEAR_TIP_M",
    "JUDGED_IN_BOX",
    "LOOKS_PER_RELEASE",
    "LOOK_CLEAR_M",
    "OPEN_MIN",
    "ReleaseWatch",
    "RolloutContext",
    "RolloutState",
    "arm_clear_of_box",
    "exit_rollout",
    "judge_rollout",
    "rate_problem",
    "retreat",
    "rollout",
]

log = get_logger("mecharm.runtime.rollout")

#: the settings this module reads (docs/settings.md, "What each stage reads"; a test
#: checks it against the code)
SETTINGS_READ: frozenset[str] = frozenset({
    "arm.home", "motion.tol_home", "motion.tol_pick_place", "rollout.after_release_s",
    "rollout.max_s", "rollout.max_step_deg", "rollout.policy", "rollout.rate_hz",
})  # fmt: skip

#: the way back stops retracing once the tool tip is this high above the mat (m): the box's
#: walls are 43 mm, a held block hangs 25 mm below the tip; HOME's tip is at 233 mm
CLEAR_TIP_M = 0.10
#: a gripper value at or above this is open (0 closed … 100 open): halfway between the
#: runtime's close (20) and open (100); a learned policy's "open" wanders well below 100
OPEN_MIN = 60
#: the control loop's ``stopped_by`` when the judge saw the block in the box
JUDGED_IN_BOX = "judged in the box"
#: the judge's looks after one release while it says no
LOOKS_PER_RELEASE = 3
#: the judge looks only while every link of the arm (base, joints, tool tip, seen from
#: above) keeps this far from the box's centre (m): half the box's outer diagonal (55 mm),
#: half a link's or the open jaws' width (~30 mm) and the parallax of a link 0.2 m up seen
#: from the top camera 0.69 m above the mat (~60 mm toward the box). Nearer, the top camera
#: sees the block between the jaws: in four played-back episodes the first look, 2 s after
#: the release, located a fragment 7-12 mm from where the judge at HOME found the block and
#: a "yes" was luck (docs/rollouts.md, "When an episode ends")
LOOK_CLEAR_M = 0.15


@dataclass
class RolloutState:
    """What the rollout's stages hand on: the policy, the poses it sent with the gripper
    value at each, the gripper as last commanded, the loop's account."""

    policy: RolloutPolicy | None = None
    #: (pose sent, gripper value then), in order: the way back
    path: list[tuple[tuple[float, ...], int]] = field(default_factory=list)
    gripper: int = GRIPPER_OPEN_VALUE
    report: LoopReport | None = None
    #: the way back opened the gripper where the policy had closed it
    put_back: bool = False


@dataclass
class RolloutContext(TrialContext):
    """Pick-and-place's context (the ports, the safe arm, the scene) and the rollout's own."""

    rollout: RolloutState = field(default_factory=RolloutState)
    #: the top camera, for a policy that looks (None: no camera, e.g. a replay)
    camera: CameraSource | None = None


def _is_open(value: int) -> bool:
    return value >= OPEN_MIN


async def rollout(ctx: RolloutContext) -> Outcome:
    """The policy at its rate until it is done, the judge sees the block in the box after
    a release (``ReleaseWatch``), or ``rollout.max_s`` of ticks are due."""
    s, r = ctx.settings, ctx.rollout
    spec = s.rollout.policy
    if spec is None:
        raise StageFailed("no policy: set rollout.policy (mecharm-runtime --policy)")
    try:
        policy = r.policy = await to_thread(load_policy, spec, s)
    except PolicyError as exc:
        raise StageFailed(str(exc)) from None
    policy.reset()
    rate = s.rollout.rate_hz  # every policy ticks at it (a recorded episode keeps its pace)
    problem = rate_problem(rate, s.scale)
    if problem:
        raise StageFailed(problem)
    real_hz = rate * s.scale
    missing = [c for c in policy.cameras if ctx.camera is None]
    if missing:
        raise StageFailed(f"the policy looks through {missing}, and this session has no top camera")
    cams = dict.fromkeys(policy.cameras, ctx.camera) if ctx.camera is not None else {}
    loop = ControlLoop(
        ctx.safe, rate_hz=real_hz, max_step_deg=s.rollout.max_step_deg,
        cameras=cams, into_box=True, note="rollout",
    )  # fmt: skip
    ctx.trace.decision(
        "rollout_policy",
        {"policy": policy.name, "rate_hz": rate, "max_s": s.rollout.max_s,
         "max_step_deg": s.rollout.max_step_deg, "cameras": list(policy.cameras)},
    )  # fmt: skip
    seen: list[Any] = [None]
    release = ReleaseWatch(s.rollout.after_release_s, rate)

    async def look(tick: int) -> bool:
        """The geometric place judge on the top camera (``EyesPort.look_place``: not the
        trial's verdict, whatever judges it) while the arm holds its pose; the loop waits, the
        ticks it takes are counted as missed. True: the block is in the box."""
        v = await ctx.eyes.look_place(f"rollout_look_{release.looks + 1}")
        ended = release.looked(tick, v)
        ctx.trace.decision(
            "rollout_look",
            {"at_step": tick, "at_s": round(tick / rate, 2), "look": release.looks,
             "verdict": v.verdict, "reason": v.reason, "ended": ended,
             "next_look_in": release.wait_left},
        )  # fmt: skip
        log.info("rollout_look", at_step=tick, verdict=v.verdict, reason=v.reason, ended=ended)
        return ended

    def keep_sent() -> None:  # the pose the last tick sent, on the way back
        step = loop.last_step
        if step is not None and step is not seen[0]:
            seen[0] = step
            if step.sent is not None:
                r.path.append((tuple(step.sent.angles), loop.gripper))

    box_xz = None if ctx.state.scene is None else ctx.state.scene.box_xz

    # the policy runs in a worker thread (a network computes for a while): the event loop,
    # the daemon's keepalive and the recorder's events go on meanwhile
    async def step(obs: Observation) -> Action | Stop | None:
        keep_sent()
        waited = release.held_off
        due = release.due(
            obs.step, loop.gripper,
            lambda: box_xz is None or arm_clear_of_box(obs.joints, box_xz),
        )  # fmt: skip
        if release.held_off and not waited:
            ctx.trace.decision(
                "rollout_look_waits",
                {"at_step": obs.step, "why": "the arm hides the box from the top camera"},
            )
        if due:
            if await look(obs.step):
                return Stop(JUDGED_IN_BOX)
            # the look took a while: this tick holds (the pose last sent, where the arm was
            # going; the reading before the look if none was), and the policy's next tick
            # sees a fresh observation instead of one taken before the look
            held = ctx.safe.last_streamed
            return Action(tuple(held if held is not None else obs.joints), None)
        out: Any = await to_thread(policy, obs)
        if inspect.isawaitable(out):
            out = await out
        if out is not None and not isinstance(out, Action):
            raise StageFailed(f"policy {policy.name}: gave {type(out).__name__}, not an Action")
        return out  # type: ignore[no-any-return]

    # a policy (or a camera) that never returns is stopped too: twice the time limit in this
    # run's time, and half a minute, is more than any loop that keeps ticking takes
    limit = 2 * s.scaled(s.rollout.max_s) + 30.0
    report: LoopReport | None = None
    try:
        with anyio.move_on_after(limit):
            report = await loop.run(step, max(1, math.ceil(s.rollout.max_s * rate)))
    finally:
        keep_sent()
        r.gripper = loop.gripper
    if report is None:
        raise StageFailed(
            f"policy {policy.name}: the rollout did not end within {limit:.0f} s (the policy or "
            "a camera read hung)"
        )
    r.report = report
    # a played-back episode's frames the arm never reached (a stall, a refused step): said,
    # not only counted in the policy
    unreached = getattr(policy, "unreached", None)
    if isinstance(unreached, int):
        ctx.trace.decision("playback", {"frames_unreached": unreached})
    log.info(
        "rollout_done", policy=policy.name, path=len(r.path), frames_unreached=unreached,
        **report.to_dict(),
    )  # fmt: skip
    return Outcome.OK


@dataclass
class ReleaseWatch:
    """When the judge looks during a rollout (docs/rollouts.md, "When an episode ends").

    A release is the gripper open (``OPEN_MIN``) at a tick after it had been closed; the
    geometric judge looks ``after_s`` of ticks later, when the block has fallen and settled,
    and again ``after_s`` after a "no", ``LOOKS_PER_RELEASE`` times at most. The waits count
    the ticks the policy ran (the calls to ``due``), not ticks a slow look or an overrun
    skipped: between two looks the arm moves for ``after_s``, also on a loaded machine. A
    look that is due waits while the arm hides the box from the top camera (``arm_clear``
    False, ``LOOK_CLEAR_M``). A "yes" ends the episode (``ended``); after the last "no" the
    policy goes on (it may grasp again) and the next look waits for the next release.
    ``after_s`` None: the judge never looks during the rollout."""

    after_s: float | None
    rate_hz: float
    closed: bool = False
    released_at: int | None = None
    #: ticks of the policy's before the judge looks next (None: not until the next release)
    wait_left: int | None = None
    #: the look is due and waits for the arm to leave the box (said once per wait)
    held_off: bool = False
    looks: int = 0
    #: looks since the last release
    since_release: int = 0
    ended: bool = False

    def _wait(self) -> int:
        assert self.after_s is not None
        return max(1, math.ceil(self.after_s * self.rate_hz))

    def due(self, tick: int, gripper: int, arm_clear: Callable[[], bool] = lambda: True) -> bool:
        """Does the judge look at this tick (the gripper as last commanded; ``arm_clear``:
        does the top camera see the box past the arm, asked only when a look is due)?
        Called once for every tick the policy runs."""
        if self.after_s is None or self.ended:
            return False
        if not _is_open(gripper):  # grasped (again)
            self.closed, self.released_at, self.wait_left = True, None, None
            self.held_off = False
        elif self.closed and self.released_at is None:
            self.released_at, self.since_release = tick, 0
            self.wait_left = self._wait()
            return False
        if self.wait_left is None:
            return False
        if self.wait_left > 0:
            self.wait_left -= 1
        if self.wait_left > 0:
            return False
        clear = arm_clear()
        self.held_off = not clear
        return clear

    def looked(self, tick: int, verdict: VerdictObservation) -> bool:
        """Take the judge's verdict at ``tick``; True: the episode ends on it."""
        self.looks += 1
        self.since_release += 1
        self.wait_left = None
        if verdict.verdict == "yes":
            self.ended = True
        elif self.since_release < LOOKS_PER_RELEASE:
            self.wait_left = self._wait()
        return self.ended


def arm_clear_of_box(joints: Sequence[float], box_xz: tuple[float, float]) -> bool:
    """Does the top camera see the box past the arm at ``joints``? Every link (base to tool
    tip, by the forward kinematics, seen from above) keeps ``LOOK_CLEAR_M`` from the box's
    centre."""
    pts = fk_frames(list(joints))[:, [0, 2]]  # x, z of the base, the six joints, the tip
    c = np.asarray(box_xz, dtype=float)
    a, b = pts[:-1], pts[1:]
    ab = b - a
    length2 = np.einsum("ij,ij->i", ab, ab)
    t = np.clip(np.einsum("ij,ij->i", c - a, ab) / np.where(length2 > 0, length2, 1.0), 0, 1)
    nearest = a + ab * t[:, None]
    return bool(np.min(np.hypot(*(nearest - c).T)) >= LOOK_CLEAR_M)


def rate_problem(rate_hz: float, scale: float) -> str | None:
    """Why a policy at ``rate_hz`` real-rig ticks a second cannot run at time scale
    ``scale`` (None: it can): the loop ticks ``rate_hz * scale`` times a real second."""
    real = rate_hz * scale
    if RATE_MIN_HZ <= real <= RATE_MAX_HZ:
        return None
    return (
        f"a rollout at {rate_hz:g} Hz and time scale {scale:g} ticks {real:g} times a second; "
        f"the control loop runs {RATE_MIN_HZ:g}-{RATE_MAX_HZ:g}: set rollout.rate_hz or the "
        "time scale so that their product is in that range"
    )


def _tip_height(pose: tuple[float, ...]) -> float:
    return float(fk_tip(pose)[1])


async def _up_and_home(
    ctx: RolloutContext, back: list[tuple[float, ...]], note: str,
    attempt: Attempt,
) -> bool:  # fmt: skip
    """Retrace ``back`` (poses, in the order to go) until the first one whose tip is clear,
    then HOME. False when a move failed (the arm stays where it got to)."""
    s = ctx.settings
    cut = next((i for i, p in enumerate(back) if _tip_height(p) >= CLEAR_TIP_M), len(back) - 1)
    here = ctx.last_measured
    if back and (here is None or _tip_height(here) < CLEAR_TIP_M):
        way = back[: cut + 1]
        ok = await attempt(
            "up the way it came",
            lambda: ctx.retrace(way, s.motion.tol_pick_place, f"{note}: up the way it came"),
        )
        if not ok:
            return False
    return await attempt("home", lambda: ctx.move(s.arm.home, s.motion.tol_home, f"{note}: home"))


async def way_back(
    ctx: RolloutContext, note: str,
    attempt: Attempt,
) -> bool:  # fmt: skip
    """From where the rollout left the arm to HOME by the poses it came through; a closed
    gripper is first taken back to where it closed and opened there. False when a step
    failed."""
    r = ctx.rollout
    await attempt("read", ctx.read)  # the reference of the first move back: where it is
    poses = [p for p, _g in r.path]
    if not _is_open(r.gripper):
        # where the policy closed it: the first pose sent closed after the last open one
        closed_at = len(r.path) - 1
        while closed_at > 0 and not _is_open(r.path[closed_at - 1][1]):
            closed_at -= 1
        down = list(reversed(poses[closed_at:]))
        opened = bool(down) and await attempt(
            "back where it closed",
            lambda: ctx.retrace(
                down, ctx.settings.motion.tol_pick_place, f"{note}: back where the gripper closed"
            ),
        )
        if opened:
            opened = await attempt("open", lambda: ctx.gripper("open", f"{note}: where it closed"))
        ctx.trace.decision("rollout_put_back", {"opened": opened, "at_step": closed_at,
                                                "gripper_was": r.gripper})  # fmt: skip
        log.warning("rollout_put_back", opened=opened, at_step=closed_at, gripper_was=r.gripper)
        if not opened:
            return False
        r.gripper, r.put_back = GRIPPER_OPEN_VALUE, True
        # from here on the way back starts where the gripper closed (also for an exit path
        # after a failed move up: never back into where the policy carried the block)
        del r.path[closed_at + 1 :]
        poses = poses[: closed_at + 1]
    return await _up_and_home(ctx, list(reversed(poses)), note, attempt)


async def _must(name: str, fn: Callable[[], Awaitable[Any]]) -> bool:
    await fn()  # a stage's step: its failure is the stage's (raised)
    return True


async def retreat(ctx: RolloutContext) -> Outcome:
    if not await way_back(ctx, "retreat", _must):  # a closed gripper with no way back to open
        raise StageFailed("retreat: the gripper is closed and the rollout sent no pose to open at")
    return Outcome.OK


async def judge_rollout(ctx: RolloutContext) -> Outcome:
    """Fresh mode off, at rest at HOME, the place judge: the block in the box or not. A
    verdict, not a failure: a rollout that missed is a completed trial judged no."""
    await ctx.arm.set_fresh_mode(0)
    ctx.state.fresh_mode_on = False
    ctx.trace.decision("fresh_mode", 0)
    await ctx.at_rest("rollout judgement")
    ctx.state.place_verdict = await ctx.eyes.judge_place(None, "rollout_judge")
    return Outcome.OK


async def exit_rollout(ctx: RolloutContext, arm_alive: bool, reason: str) -> str:
    """After a stop: the way back (a closed gripper opened where it closed), fresh mode off;
    a forced stop stops the arm where it is. Returns the trial's reason, with what it did."""
    ctx.stage = Stage.ABORT  # type: ignore[assignment]
    ctx.trace.stage = Stage.ABORT.value
    ctx.recorder.stage(Stage.ABORT.value)
    steps: list[dict[str, Any]] = []
    attempt = exit_attempts(steps)

    forced = reason.startswith("forced stop")
    if not arm_alive:
        steps.append({"step": "arm actions skipped", "why": "daemon connection lost"})
    elif forced:
        await attempt("stop", ctx.arm.stop)
    else:
        await way_back(ctx, "abort", attempt)
    if arm_alive and await attempt("fresh mode off", lambda: ctx.arm.set_fresh_mode(0)):
        ctx.state.fresh_mode_on = False
    ctx.trace.decision("exit", {"forced": forced, "steps": steps})
    if ctx.rollout.put_back:
        return reason + "; the gripper was opened where the policy had closed it"
    return reason


def held(ctx: RolloutContext) -> str | None:
    """After a stop: a gripper left closed may hold the block ("unknown": not looked at)."""
    return None if _is_open(ctx.rollout.gripper) else "unknown"
