"""The trial stage machine: explicit stages, one transition table, one exit path.

The stages are described in docs/stages.md; their names say what they do and are
the wire values written to traces, states.csv and run logs (``FORMER_NAMES`` maps
the first format's ``stage1``..``stage10`` names, for old traces).

Why a table: every way a trial can go is readable here in one place (and drawn
in docs/stages.md). A stage body returns an ``Outcome``; ``TRANSITIONS`` maps
(stage, outcome) to the next stage; any failure — a stage that raises
``StageFailed``, a lost daemon, a forced stop — leaves through ``ABORT``, the
single exit path in trial.py. Each stage body runs in its own anyio task group and
cancel scope: a forced stop cancels it at once, and nothing it started outlives it.

Every decision goes to the trace once (lookups, guard verdicts, commanded poses,
arrival results, transitions) and every outside value comes through a port, so
``mecharm replay`` can drive this same code from a trace; the run log is derived
from that trace. No decision reads the wall clock.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import anyio
import numpy as np
from numpy.typing import NDArray

from mecharm_common.envelope import Envelope
from mecharm_common.kinematics import fk_tip
from mecharm_common.logging import get_logger
from mecharm_runtime.config import RuntimeSettings
from mecharm_runtime.guard import check_pose
from mecharm_runtime.lookup.descent import PickDescent, pick_descent_table, plan_pick_descent
from mecharm_runtime.lookup.fk_lookup import FkLookupResult, fk_lookup
from mecharm_runtime.lookup.j0 import ArcPose, j0_lookup
from mecharm_runtime.lookup.table import FkTable
from mecharm_runtime.memories import CorrectionMemory, HeightMemory, cell_key
from mecharm_runtime.motion import (
    MoveResult,
)
from mecharm_runtime.perception.config import DEFAULT_CONFIG, PerceptionConfig
from mecharm_runtime.perception.judge import BOX_MOVED_MM
from mecharm_runtime.ports import (
    ArmPort,
    Clock,
    EyesPort,
    ReleaseView,
    SceneObservation,
    TipObservation,
    VerdictObservation,
)
from mecharm_runtime.recorder_link import RecorderLink
from mecharm_runtime.records.trace import TraceWriter
from mecharm_runtime.safe_arm import MotionRefused, SafeArm

__all__ = [
    "FORMER_NAMES",
    "STAGE_ORDER",
    "TRANSITIONS",
    "Outcome",
    "Stage",
    "StageFailed",
    "TrialContext",
    "TrialState",
    "run_stages",
    "up_from_mat",
]

log = get_logger("mecharm_runtime.machine")


class Stage(StrEnum):
    """The stages, in trial order; the values are the names on the wire."""

    OPEN_GRIPPER_HOME = "open_gripper_home"  # fresh mode on, HOME if not there, gripper open
    DETECT = "detect"  # top camera: block and box on the mat
    CORRECT_AIM = "correct_aim"  # apply the correction memory to the pick aim
    APPROACH_PICK = "approach_pick"  # j0 arc pose above the block
    DESCEND_PICK = "descend_pick"  # FK lookup pose at the block; measure the tip
    GRASP = "grasp"  # close the gripper
    LIFT_AND_JUDGE = "lift_and_judge"  # back to the approach pose; judge the pick
    RETRY_PICK = "retry_pick"  # open, HOME, detect again
    APPROACH_PLACE = "approach_place"  # j0 arc pose above the box
    DESCEND_PLACE = "descend_place"  # FK lookup pose into the box
    SERVO_PLACE = "servo_place"  # visual servo on j0, depth steps, side frame
    RELEASE = "release"  # block seen above the opening? then open the gripper; else hover, holding
    RETREAT_AND_JUDGE = "retreat_and_judge"  # up, swept aside; judge the place; height memory
    RETURN_HOME = "return_home"  # back over the box, HOME, fresh mode off
    DONE = "done"
    ABORT = "abort"


#: Wire names of the first trace format -> today's (replay reads old traces with these).
FORMER_NAMES: dict[str, str] = {
    "stage1": Stage.OPEN_GRIPPER_HOME, "stage2": Stage.DETECT, "correction": Stage.CORRECT_AIM,
    "stage3_approach_pick": Stage.APPROACH_PICK, "stage4_pick": Stage.DESCEND_PICK, "stage5": Stage.GRASP,
    "stage6_lift": Stage.LIFT_AND_JUDGE, "pick_retry": Stage.RETRY_PICK,
    "stage7_approach_place": Stage.APPROACH_PLACE, "stage8_place": Stage.DESCEND_PLACE,
    "stage8_5": Stage.SERVO_PLACE, "stage9": Stage.RELEASE, "stage9b": Stage.RETREAT_AND_JUDGE,
    "stage10": Stage.RETURN_HOME,
}  # fmt: skip


class Outcome(StrEnum):
    OK = "ok"
    RETRY = "retry"  # pick judged no, attempts left
    LOST = "lost"  # the block left the jaws before the release: judge where it went
    FAIL = "fail"


#: The whole machine. Anything not listed (every FAIL) goes to ABORT.
TRANSITIONS: dict[tuple[Stage, Outcome], Stage] = {
    (Stage.OPEN_GRIPPER_HOME, Outcome.OK): Stage.DETECT,
    (Stage.DETECT, Outcome.OK): Stage.CORRECT_AIM,
    (Stage.CORRECT_AIM, Outcome.OK): Stage.APPROACH_PICK,
    (Stage.APPROACH_PICK, Outcome.OK): Stage.DESCEND_PICK,
    (Stage.DESCEND_PICK, Outcome.OK): Stage.GRASP,
    (Stage.GRASP, Outcome.OK): Stage.LIFT_AND_JUDGE,
    (Stage.LIFT_AND_JUDGE, Outcome.OK): Stage.APPROACH_PLACE,
    (Stage.LIFT_AND_JUDGE, Outcome.RETRY): Stage.RETRY_PICK,
    (Stage.RETRY_PICK, Outcome.OK): Stage.DETECT,
    (Stage.APPROACH_PLACE, Outcome.OK): Stage.DESCEND_PLACE,
    (Stage.DESCEND_PLACE, Outcome.OK): Stage.SERVO_PLACE,
    (Stage.SERVO_PLACE, Outcome.OK): Stage.RELEASE,
    (Stage.SERVO_PLACE, Outcome.LOST): Stage.RETREAT_AND_JUDGE,
    (Stage.RELEASE, Outcome.OK): Stage.RETREAT_AND_JUDGE,
    (Stage.RELEASE, Outcome.LOST): Stage.RETREAT_AND_JUDGE,
    (Stage.RETREAT_AND_JUDGE, Outcome.OK): Stage.RETURN_HOME,
    (Stage.RETURN_HOME, Outcome.OK): Stage.DONE,
}
STAGE_ORDER: tuple[Stage, ...] = tuple(s for s in Stage if s not in (Stage.DONE, Stage.ABORT))


def next_stage(stage: Stage, outcome: Outcome) -> Stage:
    return TRANSITIONS.get((stage, outcome), Stage.ABORT)


class StageFailed(RuntimeError):
    """A stage cannot go on; the message is the trial's abort reason."""


class BlockLost(StageFailed):
    """The held block no longer moves with the tip (``_HeldBlockWatch``): it left the jaws.
    With ``lost_block: judge`` the stage ends ``LOST`` and the place is judged where the
    block went (docs/release.md, "A block that left the jaws"); else the trial stops.
    ``block_xz``: where the block was last seen (on the plane of a held block)."""

    def __init__(self, message: str, block_xz: tuple[float, float] | None = None) -> None:
        super().__init__(message)
        self.block_xz = block_xz


@dataclass
class TrialState:
    """What the stages learn and hand on to each other."""

    scene: SceneObservation | None = None
    aim_xz: tuple[float, float] | None = None
    correction_key: str = ""
    correction_used_mm: tuple[float, float] = (0.0, 0.0)
    #: what the pick servo added to the aim on this attempt (mm, subtracted like the correction)
    pick_servo_mm: tuple[float, float] = (0.0, 0.0)
    #: the last pick missed with the tip seen on the block in x-z: a miss in height, which the
    #: top camera cannot see; the next descent keeps to pick_retry_band
    height_miss: bool = False
    #: poses commanded at the block on this attempt (descent, then servo steps): the way back up
    pick_path: list[tuple[float, ...]] = field(default_factory=list)
    pick_approach: tuple[float, ...] | None = None
    pick_hover: bool = False  # pick_approach is the hover above the block, not the arc's pose
    #: where the lift ended and the pick was judged, holding the block (approach_place leaves
    #: from here; a put-back comes back through it)
    lifted_at: tuple[float, ...] | None = None
    #: poses commanded in the box, in order (place descent, servo and depth steps): the way back up
    place_path: list[tuple[float, ...]] = field(default_factory=list)
    pick_pose: tuple[float, ...] | None = None
    pick_ee_y: float | None = None
    tip: TipObservation | None = None
    pick_attempts: int = 0
    pick_verdict: VerdictObservation | None = None
    #: where the top camera saw the block (on the mat's plane) right after a lift judged
    #: "yes"; a block later lost that still lies there never left the mat
    lifted_block_xz: tuple[float, float] | None = None
    place_key: str = ""
    #: the place band's dee_y when the cell was new and started from the learnt cells (else 0)
    place_dee_start_mm: float = 0.0
    place_approach: tuple[float, ...] | None = None
    place_pose: tuple[float, ...] | None = None
    place_ee_y: float | None = None
    side_frame: str | None = None
    release_view: ReleaseView | None = None
    #: the release check confirmed the block above the opening (False: refused, or released anyway)
    release_confirmed: bool = False
    #: the arm holds the block in the hover above the place (the release was refused)
    hovering: bool = False
    #: why the release was refused ("" : not refused, or released anyway)
    release_refused: str = ""
    #: the exit path put the refused block back on the mat (docs/release.md)
    put_back: bool = False
    #: the held block left the jaws before the release (``held_block_lost``)
    block_lost: bool = False
    #: at a stop believing the block held: what the top camera saw at the tip (seen,
    #: not_seen, unknown; "" : not looked)
    held_evidence: str = ""
    place_verdict: VerdictObservation | None = None
    holding: bool = False
    fresh_mode_on: bool = False
    stage_times: dict[str, float] = field(default_factory=dict)


@dataclass
class TrialContext:
    """Everything a stage may use. Ports are already traced (see trial.py)."""

    settings: RuntimeSettings
    arm: ArmPort
    eyes: EyesPort
    recorder: RecorderLink
    clock: Clock
    trace: TraceWriter
    table: FkTable
    arc_pick: ArcPose
    arc_place: ArcPose
    corrections: CorrectionMemory
    heights: HeightMemory
    run_dir: Path | None = None
    state: TrialState = field(default_factory=TrialState)
    stage: Stage = Stage.OPEN_GRIPPER_HOME
    on_stage: Callable[[str, str, str], None] | None = None  # (stage, outcome, detail) status lines
    #: told the stage's name as it starts (the operator's console, docs/console.md); never a decision
    on_stage_start: Callable[[str], None] | None = None
    #: the data root's fault, if any (records/trace.py); read before each stage (docs/reliability.md)
    storage_fault: Callable[[], str | None] = lambda: None
    #: the daemon's safety envelope as the trial started (None: none announced); every guard
    #: verdict keeps to the narrower of it and the settings (docs/daemon.md, "Safety envelope")
    envelope: Envelope | None = None
    #: box geometry for the path check (docs/safety.md); the runtime's ``perception:`` config
    workcell: PerceptionConfig = DEFAULT_CONFIG
    #: every motion of the trial goes through it (safe_arm.py); built from the fields above
    safe: SafeArm = field(init=False)

    def __post_init__(self) -> None:
        self.safe = SafeArm(
            settings=self.settings,
            arm=self.arm,
            clock=self.clock,
            trace=self.trace,
            recorder=self.recorder,
            where=lambda: self.stage.value,
            box_xz=lambda: None if self.state.scene is None else self.state.scene.box_xz,
            envelope=self.envelope,
            workcell=self.workcell,
        )

    # ------------------------------------------- the safe arm, as the stages call it
    @property
    def last_commanded(self) -> tuple[float, ...] | None:
        return self.safe.last_commanded

    @last_commanded.setter
    def last_commanded(self, pose: tuple[float, ...] | None) -> None:
        self.safe.last_commanded = pose

    @property
    def last_measured(self) -> tuple[float, ...] | None:
        return self.safe.last_measured

    @last_measured.setter
    def last_measured(self, pose: tuple[float, ...] | None) -> None:
        self.safe.last_measured = pose

    async def sleep(self, real_rig_seconds: float) -> None:
        await self.safe.sleep(real_rig_seconds)

    async def read(self) -> tuple[float, ...]:
        return await self.safe.read()

    async def at_rest(self, note: str) -> None:
        await self.safe.at_rest(note)

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
        return await self.safe.move(
            target, tol, note, lookup_ok=lookup_ok, lookup_reason=lookup_reason,
            near_work=near_work, into_box=into_box,
        )  # fmt: skip

    async def retrace(
        self, waypoints: Sequence[Sequence[float]], tol: float, note: str, *, into_box: bool = True
    ) -> None:
        await self.safe.retrace(waypoints, tol, note, into_box=into_box)

    def motion_checks(
        self, target: Sequence[float], *, near_work: bool, into_box: bool
    ) -> tuple[dict[str, Any], str | None]:
        return self.safe.motion_checks(target, near_work=near_work, into_box=into_box)

    async def gripper(self, action: str, note: str) -> None:
        await self.safe.gripper(action, note)


# ==================================================================== stage bodies


async def open_gripper_home(ctx: TrialContext) -> Outcome:
    s = ctx.settings
    await ctx.arm.set_fresh_mode(1)
    ctx.state.fresh_mode_on = True
    ctx.trace.decision("fresh_mode", 1)
    cur = await ctx.read()
    away = max(abs(a - h) for a, h in zip(cur, s.home, strict=True))
    need_home = away > s.tol_home
    ctx.trace.decision("home_needed", {"max_delta": away, "needed": need_home})
    if need_home:
        await ctx.move(s.home, s.tol_home, "home")
    await ctx.gripper("open", "initial open")
    return Outcome.OK


async def detect(ctx: TrialContext) -> Outcome:
    obs = await ctx.eyes.observe_scene(f"detect_attempt{ctx.state.pick_attempts + 1}")
    if not obs.ok or obs.block_xz is None or obs.box_xz is None:
        raise StageFailed(f"{ctx.stage}: detection failed: {obs.reason or 'no block/box'}")
    if not obs.box_trusted:  # never in traces from before the flag: they read as trusted
        go_on = ctx.settings.place_at_untrusted_box
        ctx.trace.decision("box_untrusted", {"doubt": obs.box_doubt, "proceed": go_on})
        if not go_on:
            raise StageFailed(f"{ctx.stage}: {obs.box_doubt or 'box detection not trusted'}")
    ctx.state.scene = obs
    return Outcome.OK


async def correct_aim(ctx: TrialContext) -> Outcome:
    s = ctx.settings
    assert ctx.state.scene is not None and ctx.state.scene.block_xz is not None
    bx, bz = ctx.state.scene.block_xz
    key = cell_key("pick", bx, bz, s.cell_mm)
    entry = ctx.corrections.get(key)
    dx = dz = 0.0
    if entry is not None:
        lim = s.max_correction_mm
        dx, dz = max(-lim, min(lim, entry.dx_mm)), max(-lim, min(lim, entry.dz_mm))
    aim = (bx - dx / 1000.0, bz - dz / 1000.0)
    ctx.state.aim_xz, ctx.state.correction_key, ctx.state.correction_used_mm = aim, key, (dx, dz)
    info = {
        "key": key,
        "entry": None if entry is None else entry.__dict__,
        "applied_mm": [dx, dz],
        "block_xz": [bx, bz],
        "aim_xz": list(aim),
    }
    ctx.trace.decision("correction", info)
    return Outcome.OK


async def approach_pick(ctx: TrialContext) -> Outcome:
    s = ctx.settings
    assert ctx.state.aim_xz is not None
    res = j0_lookup(ctx.arc_pick, ctx.state.aim_xz)
    ctx.trace.decision("lookup", {"phase": "approach_pick", **res.to_dict()})
    if not res.ok:
        raise StageFailed(f"{ctx.stage}: j0 lookup out_of_range: {res.reason}")
    if abs(res.resid_x) > s.x_resid_thresh_m:
        raise StageFailed(f"{ctx.stage}: x residual {res.resid_x:.3f} m > {s.x_resid_thresh_m} m")
    await ctx.move(res.angles, s.tol_approach, "approach_pick", lookup_ok=True)
    ctx.state.pick_approach = tuple(res.angles)
    return Outcome.OK


async def descend_pick(ctx: TrialContext) -> Outcome:
    s = ctx.settings
    st = ctx.state
    assert st.aim_xz is not None and st.scene is not None and st.scene.block_xz is not None
    st.pick_hover = False  # approach_pick has just set pick_approach to the arc's pose
    if _step_bound(s, st.pick_approach):
        res = await _bounded_pick(ctx)
    else:
        res = fk_lookup(ctx.table, "pick", st.aim_xz, *_pick_band(ctx), dist_max=s.dist_max_m)
        ctx.trace.decision("lookup", res.to_dict())
    if (not res.ok or res.angles is None) and st.height_miss:
        # no row in the retry band reaches the block from here: the whole band, as before
        ctx.trace.decision("height_retry_band", {"reachable": False, "reason": res.reason})
        st.height_miss = False
        return await descend_pick(ctx)
    if not res.ok or res.angles is None:
        raise StageFailed(f"{ctx.stage}: fk lookup out_of_range: {res.reason}")
    await ctx.move(
        res.angles,
        s.tol_pick_place,
        "pick descend",
        lookup_ok=res.ok,
        lookup_reason=res.reason or "",
        near_work=True,
    )
    st.pick_pose, st.pick_ee_y = tuple(res.angles), res.selected_ee_y
    st.pick_servo_mm, st.pick_path = (0.0, 0.0), [st.pick_pose]
    await ctx.at_rest("tip measurement")
    tip = await ctx.eyes.measure_tip(
        st.scene.block_xz,
        float(res.selected_ee_y or _pick_band(ctx)[0]) + s.pick_tip_height_mm / 1000.0,
        "descend_pick_tip",
    )
    st.tip = tip
    if s.pick_servo_max_iter > 0:
        await _servo_pick(ctx)
    return Outcome.OK


def _pick_servo_step(
    s: RuntimeSettings, tip: TipObservation, used: tuple[float, float], done: tuple[float, float]
) -> tuple[tuple[float, float] | None, str]:
    """The next servo step (mm, subtracted from the aim) for a measured tip offset, or None and
    why not: within ``pick_servo_tol_mm``; else the offset, shortened to ``pick_servo_step_mm``
    and so that the aim stays within ``max_correction_mm`` (per axis) of the detected block,
    counting the memory's correction (``used``) and the steps already made (``done``)."""
    if not tip.ok or not (math.isfinite(tip.dx_mm) and math.isfinite(tip.dz_mm)):
        return None, f"tip not measured: {tip.reason or 'no measurement'}"
    dist = math.hypot(tip.dx_mm, tip.dz_mm)
    if dist <= s.pick_servo_tol_mm:
        return None, "within tolerance"
    k = min(1.0, s.pick_servo_step_mm / dist)
    want = (tip.dx_mm * k, tip.dz_mm * k)
    lim = s.max_correction_mm
    step = tuple(
        max(-lim, min(lim, u + d + w)) - (u + d) for u, d, w in zip(used, done, want, strict=True)
    )
    if math.hypot(*step) < 0.5:
        return None, (
            f"total bound: the aim is already max_correction_mm {lim:g} mm from the block "
            f"(memory {used[0]:+.1f}/{used[1]:+.1f} mm, servo {done[0]:+.1f}/{done[1]:+.1f} mm)"
        )
    return (step[0], step[1]), "step"


def _solve_tip(
    q0: NDArray[np.float64], goal: NDArray[np.float64], box: float, j1_max: float
) -> NDArray[np.float64]:
    """Joints near ``q0`` that put the model's tip at ``goal`` (x, y, z), as near as they can:
    damped least squares on j0-j4 (the flange keeps its angle), every joint within ``box``
    degrees of ``q0``, j1 held just under ``j1_max`` once it reaches it. The caller checks
    how near the result came, and every guard still checks the pose."""
    q = q0.copy()
    free = [0, 1, 2, 3, 4]
    for _ in range(20):
        tip = np.asarray(fk_tip(q))
        err = goal - tip
        if float(np.linalg.norm(err)) < 1e-5:
            break
        J = np.empty((3, len(free)))
        for c, j in enumerate(free):
            d = q.copy()
            d[j] += 0.01
            J[:, c] = (np.asarray(fk_tip(d)) - tip) / 0.01
        dq = J.T @ np.linalg.solve(J @ J.T + 1e-6 * np.eye(3), err)
        q[free] += np.clip(dq, -5.0, 5.0)
        q = np.clip(q, q0 - box, q0 + box)
        if 1 in free and q[1] > j1_max - 0.5:
            q[1] = j1_max - 0.5
        free = [j for j in free if abs(q[j] - q0[j]) < box - 1e-9 and not (
            j == 1 and q[1] >= j1_max - 0.5)]  # fmt: skip
        if not free:
            break
    return q


def _fine_step(
    s: RuntimeSettings,
    pose: tuple[float, ...],
    aim: tuple[float, float],
    band: tuple[float, float],
    where: str = "pick",
) -> tuple[tuple[float, ...] | None, str, str | None]:
    """(pose, "fine", None) moving the tip from ``pose`` to ``aim`` at the same height, or
    (None, "fine", why not). The table's rows within the continuity bound of a pick pose can
    lie 10-15 mm apart, coarser than the servo's steps, so the step is solved with the FK
    model: damped least squares on j0-j4 from the arm's pose (the flange keeps its angle),
    j1 held at ``j1_max`` once it reaches it and every joint within ``joint_step_max_deg``
    of the pose. The pose must land within ``pick_resid_max_m`` of the aim, or at least
    halve the way to it (the bound allows no more: the next measurement decides again),
    inside ``band`` (the ``where`` band: pick, or place for a depth step), and then pass
    every guard."""
    q0 = np.asarray(pose, dtype=np.float64)
    goal = np.array([aim[0], float(fk_tip(q0)[1]), aim[1]])
    way = float(np.linalg.norm(goal - np.asarray(fk_tip(q0))))
    box = s.joint_step_max_deg if s.joint_step_max_deg > 0 else 180.0
    q = _solve_tip(q0, goal, box, s.j1_max)
    tip = np.asarray(fk_tip(q))
    resid = float(math.hypot(tip[0] - aim[0], tip[2] - aim[1]))
    if not all(math.isfinite(v) for v in q) or resid > max(s.pick_resid_max_m, way / 2):
        return (
            None,
            "fine",
            (
                f"no fine step within the joint bound lands within {s.pick_resid_max_m * 1000:g} mm "
                f"of the aim or halfway to it ({resid * 1000:.1f} mm off)"
            ),
        )
    if not band[0] <= float(tip[1]) < band[1]:
        return None, "fine", f"fine step leaves the {where} band (ee_y {float(tip[1]):.3f} m)"
    return tuple(round(float(v), 3) for v in q), "fine", None


async def _servo_pick(ctx: TrialContext) -> None:
    """Pick servo (docs/stages.md, "The pick servo"): while the top camera sees the tip farther
    than ``pick_servo_tol_mm`` from the block in x-z, re-aim by the measured offset through the
    pick lookup and every motion guard, then measure again; at most ``pick_servo_max_iter``
    steps. The first step the lookup or a guard refuses ends the servo at the last safe pose.
    """
    s, st = ctx.settings, ctx.state
    assert st.scene is not None and st.scene.block_xz is not None
    assert st.aim_xz is not None and st.pick_pose is not None and st.tip is not None
    bx, bz = st.scene.block_xz
    pose = st.pick_pose
    # the descent's table (with the lattices around the pick arc when the bound is on): a
    # bounded step finds rows as close to its aim as the descent did
    table = pick_descent_table(ctx.table, ctx.arc_pick) if _step_bound(s, pose) else ctx.table
    band = _pick_band(ctx)
    iters, why = 0, "max iterations"
    for it in range(1, s.pick_servo_max_iter + 1):
        tip = st.tip
        step, why = _pick_servo_step(s, tip, st.correction_used_mm, st.pick_servo_mm)
        entry: dict[str, Any] = {"iter": it, "tip_dx_mm": tip.dx_mm, "tip_dz_mm": tip.dz_mm}
        if step is None:
            ctx.trace.decision("pick_servo", {**entry, "action": why})
            break
        total = (st.pick_servo_mm[0] + step[0], st.pick_servo_mm[1] + step[1])
        used = st.correction_used_mm
        aim = (bx - (used[0] + total[0]) / 1000.0, bz - (used[1] + total[1]) / 1000.0)
        res = fk_lookup(
            table, "pick", aim, *band, dist_max=s.dist_max_m,
            **_step_bound(s, pose),
        )  # fmt: skip
        ctx.trace.decision("lookup", {"pick_servo": it, **res.to_dict()})
        entry.update(step_mm=list(step), total_mm=list(total), aim_xz=list(aim))
        stop: str | None = None
        target: tuple[float, ...] | None = None
        how = "lookup"
        if res.ok and res.angles is not None and (res.distance or 0.0) <= s.pick_resid_max_m:
            target = tuple(res.angles)
        elif res.ok or s.pick_servo_fine_fallback:
            # no table row that near under the bound (at the edge of reach, none within
            # dist_max at all): solve the small step from this pose with the FK model
            target, how, stop = _fine_step(s, pose, aim, band)
            if res.ok:
                entry["lookup_lands_mm"] = 1000.0 * (res.distance or 0.0)
            else:
                entry["lookup"] = f"out_of_range: {res.reason}"
                if stop is not None:
                    stop = f"lookup out_of_range: {res.reason}; {stop}"
        else:
            stop = f"lookup out_of_range: {res.reason}"
        if target is not None and stop is None:
            entry["how"] = how
            verdict = check_pose(
                target, j1_max=s.j1_max, lookup_ok=how == "lookup" or None, envelope=ctx.envelope
            )
            stop = None if verdict.ok else f"guard: {verdict.reason}"
            if stop is None:
                stop = ctx.motion_checks(verdict.angles, near_work=True, into_box=False)[1]
        if stop is not None or target is None:
            why = stop or "no pose"
            ctx.trace.decision("pick_servo", {**entry, "action": f"stop: {why}"})
            log.warning("pick_servo_stop", iter=it, reason=why)
            break
        ctx.trace.decision("pick_servo", {**entry, "action": "move", "angles": list(target)})
        await ctx.move(
            target, s.tol_pick_place, f"pick servo {it}", lookup_ok=how == "lookup" or None,
            near_work=True,
        )  # fmt: skip
        pose = target
        height = float(fk_tip(pose)[1])
        st.pick_path.append(pose)
        st.pick_pose, st.pick_ee_y, st.aim_xz, st.pick_servo_mm = pose, height, aim, total
        iters = it
        await ctx.at_rest(f"pick servo {it}")
        st.tip = await ctx.eyes.measure_tip(
            (bx, bz), height + s.pick_tip_height_mm / 1000.0, f"descend_pick_servo{it}"
        )
    else:
        if st.tip is not None:  # the last step's measurement decides "converged"
            _step, why = _pick_servo_step(s, st.tip, st.correction_used_mm, st.pick_servo_mm)
            if _step is not None:
                why = f"pick_servo_max_iter {s.pick_servo_max_iter} steps made, still off"
    ctx.trace.decision(
        "pick_servo_result",
        {"steps": iters, "total_mm": list(st.pick_servo_mm), "converged": why == "within tolerance",
         "why": why},
    )  # fmt: skip


async def grasp(ctx: TrialContext) -> Outcome:
    await ctx.gripper("close", "grasp")
    ctx.state.holding = True
    return Outcome.OK


async def lift_and_judge(ctx: TrialContext) -> Outcome:
    s = ctx.settings
    st = ctx.state
    assert st.pick_approach is not None
    await up_from_mat(ctx, "lift")
    judged_at = st.pick_approach
    if st.pick_hover:
        # lifted straight up to the hover: go on, at height, to the approach arc's pose, where
        # the pick judge sees the block leave its mat position as it always did (docs/safety.md)
        assert st.aim_xz is not None
        arc = j0_lookup(ctx.arc_pick, st.aim_xz)
        judged_at = tuple(arc.angles)
        await ctx.move(judged_at, s.tol_lift_to_arc, "lift: to the approach arc", lookup_ok=True)
    st.pick_attempts += 1
    st.lifted_at = tuple(judged_at)
    lift_ee_y = float(fk_tip(judged_at)[1])
    await ctx.at_rest("pick judgement")
    v = await ctx.eyes.judge_pick(lift_ee_y, f"lift_judge_attempt{st.pick_attempts}")
    st.pick_verdict = v
    if v.verdict == "yes":
        _learn_correction(ctx)
        if s.pick_recheck_mm is not None:
            at = fk_tip(judged_at)
            st.lifted_block_xz = await ctx.eyes.locate_block(
                0.0, (float(at[0]), float(at[2])), f"lift_mat_attempt{st.pick_attempts}"
            )
        return Outcome.OK
    if s.correction_learn == "measured":  # a miss with a measured tip still shows the offset
        _learn_correction(ctx)
    tip = st.tip
    if s.pick_height_retry and tip is not None and tip.ok:
        st.height_miss = tip.dist_mm <= s.pick_servo_tol_mm
        ctx.trace.decision(
            "height_miss",
            {"tip_mm": tip.dist_mm, "height_miss": st.height_miss, "band": list(_pick_band(ctx))},
        )
    if st.pick_attempts < s.max_pick_attempts:
        ctx.trace.decision("pick_retry", {"attempt": st.pick_attempts, "of": s.max_pick_attempts})
        return Outcome.RETRY
    raise StageFailed(f"{ctx.stage}: pick judged no after {st.pick_attempts} attempts: {v.reason}")


def _learn_correction(ctx: TrialContext) -> None:
    """Learn the offset from the attempt's last tip measurement: after a pick judged yes, and
    with ``correction_learn: measured`` after a miss too (docs/runtime.md, "Memories"). The
    aim was the block minus the memory's correction and the servo's steps; the tip landed
    the measured offset from the block, so the arm's offset is their sum."""
    st, s = ctx.state, ctx.settings
    tip = st.tip
    if tip is None or not tip.ok or not (math.isfinite(tip.dx_mm) and math.isfinite(tip.dz_mm)):
        ctx.trace.decision(
            "correction_update",
            {"key": st.correction_key, "updated": False, "why": "tip not measured"},
        )
        return
    used = (
        st.correction_used_mm[0] + st.pick_servo_mm[0],
        st.correction_used_mm[1] + st.pick_servo_mm[1],
    )
    new = ctx.corrections.update(st.correction_key, *used, tip.dx_mm, tip.dz_mm, s.ema_alpha)
    ctx.trace.decision(
        "correction_update",
        {"key": new.key, "updated": True, "dx_mm": new.dx_mm, "dz_mm": new.dz_mm, "n": new.n},
    )


async def up_from_mat(ctx: TrialContext, note: str) -> None:
    """From the pick pose up to the pick approach pose (tol 2.0): one move, or after pick servo
    steps back the way the arm came down, each move within the joint bound (docs/safety.md)."""
    s, st = ctx.settings, ctx.state
    assert st.pick_approach is not None
    if len(st.pick_path) > 1:
        await ctx.retrace(
            [*reversed(st.pick_path[:-1]), st.pick_approach], s.tol_approach, note,
            into_box=False,
        )  # fmt: skip
        return
    await ctx.move(st.pick_approach, s.tol_approach, note, lookup_ok=True, near_work=True)


async def lower_to_mat(ctx: TrialContext, why: str) -> None:
    """Back down to the pick pose the way the descent went: over the block first when the
    pick came from the hover (the judge looked from the arc's pose), then straight down."""
    s, st = ctx.settings, ctx.state
    assert st.pick_pose is not None and st.pick_approach is not None
    if st.pick_hover:
        await ctx.move(st.pick_approach, s.tol_approach, f"{why}: over the block", lookup_ok=True)
    if len(st.pick_path) > 1:  # the servo moved: down the way it went
        await ctx.retrace(
            st.pick_path, s.tol_pick_place, f"{why}: lower to the mat", into_box=False
        )
        return
    await ctx.move(
        st.pick_pose, s.tol_pick_place, f"{why}: lower to the mat", lookup_ok=True, near_work=True
    )


async def retry_pick(ctx: TrialContext) -> Outcome:
    """A missed pick: open where a partly held block cannot fall far, then HOME, so detect sees
    the mat unobstructed as on the first attempt.

    ``retry_open_at`` (docs/stages.md, "retry_pick"): ``mat`` lowers to the pick pose (the
    block, if held, is back on the mat where it was grasped), opens, goes up again; ``swept``
    turns j0 to ``swept_j0`` at the lift height first, as the rig did; ``lift`` opens where the
    arm is (the behaviour before the setting).
    """
    s, st = ctx.settings, ctx.state
    where = s.retry_open_at
    if where != "lift" and (st.pick_pose is None or st.pick_approach is None):
        where = "lift"  # never lowered: nothing to lower to (cannot happen after a grasp)
    if where != "lift":
        ctx.trace.decision("retry_release", {"open_at": where})
    if where == "mat":
        await lower_to_mat(ctx, "retry")
    elif where == "swept":
        assert st.pick_approach is not None
        swept = (s.swept_j0, *st.pick_approach[1:])
        await ctx.move(swept, s.tol_pick_place, "retry: swept aside")
    note = "release after failed pick" + ("" if where == "lift" else f" ({where})")
    await ctx.gripper("open", note)
    st.holding = False
    if where == "mat":
        await up_from_mat(ctx, "retry: up from the mat")
    await ctx.move(s.home, s.tol_home, "home before re-detect")
    return Outcome.OK


async def approach_place(ctx: TrialContext) -> Outcome:
    s = ctx.settings
    st = ctx.state
    assert st.scene is not None and st.scene.box_xz is not None
    res = j0_lookup(ctx.arc_place, st.scene.box_xz)
    ctx.trace.decision("lookup", {"phase": "approach_place", **res.to_dict()})
    if not res.ok:
        raise StageFailed(f"{ctx.stage}: j0 lookup out_of_range: {res.reason}")
    if abs(res.resid_z) > s.z_resid_warn_m:
        log.warning("place_z_residual_large", resid_z=res.resid_z, limit=s.z_resid_warn_m)
        ctx.trace.decision(
            "z_residual_warning", {"resid_z": res.resid_z, "limit": s.z_resid_warn_m}
        )
    pose = _raised_approach(ctx, tuple(res.angles), st.scene.box_xz)
    await ctx.move(pose, s.tol_pick_place, "approach_place", lookup_ok=True)
    st.place_approach = tuple(pose)
    return Outcome.OK


#: how far (degrees, per joint) the raised approach may leave the arc's pose
_RAISE_BOX_DEG = 30.0
#: how near (m, in 3D) the raised approach's tip must come to the height it was raised to
_RAISE_RESID_M = 0.002


def _raised_approach(
    ctx: TrialContext, arc_pose: tuple[float, ...], box_xz: tuple[float, float]
) -> tuple[float, ...]:
    """The approach pose over the box: the arc's pose, raised when the place band the height
    memory asks for reaches above it (docs/stages.md, "approach_place: over the wall").

    The arm carries the block from the lift to this pose in one joint-space move whose tip
    height runs between the two ends', so this pose decides how high the block crosses the
    box's wall. An arm that holds the block lower than the model says (the height memory has
    learnt so: the place band moved up) would otherwise cross the wall at the arc's fixed
    height and knock the block out of the jaws (``harsh``: the tip 35-50 mm below the
    model's with the block, docs/simulation-arm.md). The raised pose keeps the arc pose's
    x-z and puts the tip ``place_approach_above_band_mm`` above the band's top, solved with
    the FK model near the arc's pose; a pose it cannot solve leaves the arc's pose (traced).
    """
    s, st = ctx.settings, ctx.state
    if s.place_approach_above_band_mm is None:
        return arc_pose
    st.place_key = cell_key("place", *box_xz, s.cell_mm)
    _lo, hi, dee = _place_band(ctx)
    want = hi + s.place_approach_above_band_mm / 1000.0
    q0 = np.asarray(arc_pose, dtype=np.float64)
    tip0 = np.asarray(fk_tip(q0))
    if float(tip0[1]) >= want:
        return arc_pose
    goal = np.array([float(tip0[0]), want, float(tip0[2])])
    q = _solve_tip(q0, goal, _RAISE_BOX_DEG, s.j1_max)
    tip = np.asarray(fk_tip(q))
    miss = float(np.linalg.norm(tip - goal))
    ok = bool(np.all(np.isfinite(q))) and miss <= _RAISE_RESID_M
    raised = tuple(round(float(v), 3) for v in q)
    ctx.trace.decision(
        "approach_raise",
        {"dee_y_mm": dee, "arc_ee_y": round(float(tip0[1]), 4), "want_ee_y": round(want, 4),
         "ok": ok, "miss_mm": round(miss * 1000, 2), "angles": list(raised) if ok else None},
    )  # fmt: skip
    return raised if ok else arc_pose


async def _bounded_pick(ctx: TrialContext) -> FkLookupResult:
    """The pick lookup under the continuity bound (docs/safety.md): the direct descent, or,
    when the approach pose is not above the block, a hover pose first (moved to here)."""
    s, st = ctx.settings, ctx.state
    aim, approach = st.aim_xz, st.pick_approach
    assert aim is not None and approach is not None

    def plan_it() -> PickDescent:
        return plan_pick_descent(
            pick_descent_table(ctx.table, ctx.arc_pick),
            aim,
            approach,
            pick_band=_pick_band(ctx),
            hover_band=s.pick_hover_band,
            dist_max=s.dist_max_m,
            hover_dist_max=s.pick_hover_dist_m,
            resid_max=s.pick_resid_max_m,
            step_max=s.joint_step_max_deg,
        )

    # a worker thread: the first call extends the table (~0.2-1 s), a hover search can take
    # ~0.5 s; the event loop keeps serving the daemon link meanwhile
    plan = await anyio.to_thread.run_sync(plan_it)
    ctx.trace.decision("lookup", plan.direct.to_dict())
    if plan.direct.ok and plan.hover is None and plan.from_hover is None:
        return plan.direct
    ctx.trace.decision(
        "pick_hover",
        {"used": plan.use_hover, "hover": None if plan.hover is None else plan.hover.to_dict(),
         "pick": None if plan.from_hover is None else plan.from_hover.to_dict()},
    )  # fmt: skip
    if plan.use_hover:
        assert plan.hover is not None and plan.hover.angles is not None
        await ctx.move(plan.hover.angles, s.tol_approach, "pick hover", lookup_ok=True)
        st.pick_approach = tuple(plan.hover.angles)  # the lift comes back here
        st.pick_hover = True
    return plan.pick


def _pick_band(ctx: TrialContext) -> tuple[float, float]:
    """The pick lookup's ee_y band: ``pick_band``, or after a miss in height (the tip was on
    the block in x-z) ``pick_retry_band``, the middle of it, farthest from both ends of the
    gripper's reach in height (docs/stages.md, "The pick servo"); both moved by the
    calibrated ``pick_tip_height_mm``."""
    s = ctx.settings
    lo, hi = s.pick_retry_band if ctx.state.height_miss and s.pick_height_retry else s.pick_band
    # a calibrated tip height error: choose rows whose true tip height is in the band
    h = s.pick_tip_height_mm / 1000.0
    return (lo - h, hi - h) if h else (lo, hi)


def _step_bound(s: RuntimeSettings, ref: Sequence[float] | None) -> dict[str, Any]:
    """The lookup's joint-continuity arguments (docs/safety.md): none when the bound is off."""
    if s.joint_step_max_deg <= 0 or ref is None:
        return {}
    return {"step_ref": tuple(ref), "step_max": s.joint_step_max_deg}


def _place_band(ctx: TrialContext) -> tuple[float, float, float | None]:
    """(band_min, band_max, dee_y_mm): memory target 0.100 + dee_y, band the 30 mm below it."""
    s, st = ctx.settings, ctx.state
    dee = ctx.heights.get(st.place_key)
    if dee is None and s.height_new_cell != "zero":
        # a new cell starts where the learnt cells are
        dee = ctx.heights.highest() if s.height_new_cell == "highest" else ctx.heights.learnt()
        st.place_dee_start_mm = dee or 0.0
    if dee is None and s.height_start_mm > 0:  # nothing learnt anywhere yet
        dee = st.place_dee_start_mm = s.height_start_mm
    if dee is None:
        return s.place_band[0], s.place_band[1], None
    target = s.place_target_m + dee / 1000.0
    return target - s.place_band_depth_m, target, dee


def _place_lookup(
    ctx: TrialContext, aim: tuple[float, float], ref: Sequence[float], lo: float, hi: float
) -> FkLookupResult:
    """The place's one lookup rule (descend_place, its depth steps, a re-aim's descent): the
    ``place_withblock`` row nearest ``aim`` in the band [lo, hi), every joint within
    ``place_joint_tol`` of ``ref`` and within the continuity bound from it, above the floor."""
    s = ctx.settings
    return fk_lookup(
        ctx.table,
        "place_withblock",
        aim,
        lo,
        hi,
        dist_max=s.dist_max_m,
        ref_joints=ref,
        joint_tol=s.place_joint_tol,
        ee_y_floor=s.place_floor_m,
        **_step_bound(s, ref),
    )


async def descend_place(ctx: TrialContext) -> Outcome:
    s, st = ctx.settings, ctx.state
    assert st.scene is not None and st.scene.box_xz is not None and st.place_approach is not None
    st.place_key = cell_key("place", *st.scene.box_xz, s.cell_mm)
    lo, hi, dee = _place_band(ctx)
    band = {"key": st.place_key, "dee_y_mm": dee, "band": [lo, hi]}
    if st.place_dee_start_mm:  # a new cell that started from the learnt cells
        band["new_cell_from_learnt"] = True
    ctx.trace.decision("place_band", band)
    res = _place_lookup(ctx, st.scene.box_xz, st.place_approach, lo, hi)
    ctx.trace.decision("lookup", res.to_dict())
    if not res.ok or res.angles is None:
        raise StageFailed(f"{ctx.stage}: fk lookup out_of_range: {res.reason}")
    await ctx.move(
        res.angles,
        s.tol_pick_place,
        "place descend",
        lookup_ok=res.ok,
        near_work=True,
        into_box=True,
    )
    st.place_pose, st.place_ee_y = tuple(res.angles), res.selected_ee_y
    st.place_path = [st.place_pose]
    return Outcome.OK


def _dx_dj0_sign(pose: Sequence[float]) -> float:
    """Sign of d(tip x)/d(j0) at ``pose`` from the kinematic model (negative in the Unity frame)."""
    a = list(pose)
    b = list(pose)
    a[0] -= 0.5
    b[0] += 0.5
    return 1.0 if float(fk_tip(b)[0]) >= float(fk_tip(a)[0]) else -1.0


class _HeldBlockWatch:
    """A held block moves with the tip: between two sightings in the place servo, when the
    tip (by the model) moved ``servo_drop_tip_mm`` or more and the block less than a third
    of that and less than ``servo_drop_still_mm`` (it lay still), the block is no longer in
    the jaws (it slipped out against the box, or was never held) and the servo must not go
    on steering a block that is not there
    (docs/stages.md, "servo_place"). The stage stops naming it, and the trial no longer
    counts the block as held: the exit path goes up and HOME as after any stop."""

    def __init__(self, ctx: TrialContext) -> None:
        self.ctx = ctx
        self.last: tuple[tuple[float, float], tuple[float, float]] | None = None

    def check(self, block_xz: tuple[float, float], pose: Sequence[float], where: str) -> None:
        s = self.ctx.settings
        tip = fk_tip(pose)
        tip_xz = (float(tip[0]), float(tip[2]))
        last, self.last = self.last, (tuple(block_xz), tip_xz)  # type: ignore[assignment]
        if not s.servo_drop_check or last is None:
            return
        tip_mm = math.dist(tip_xz, last[1]) * 1000.0
        block_mm = math.dist(block_xz, last[0]) * 1000.0
        if tip_mm < s.servo_drop_tip_mm:
            return
        info = {"where": where, "tip_moved_mm": tip_mm, "block_moved_mm": block_mm}
        still = s.servo_drop_still_mm is None or block_mm < s.servo_drop_still_mm
        if block_mm < tip_mm / 3.0 and not still:
            # the block moved, less than the tip: not the evidence of a block lying still that
            # "not in the jaws" needs (a held block partly hidden by the wrist looks so); the
            # servo goes on, the next sighting and the release check look again
            self.ctx.trace.decision("held_block_lagged", info)
        elif block_mm < tip_mm / 3.0:
            self.ctx.trace.decision("held_block_lost", info)
            _learn_failed_place(self.ctx, "lost")
            # the evidence says the jaws are empty: the exit path goes up and HOME as for any
            # stop without a block, instead of announcing a block held in the hover
            self.ctx.state.holding = False
            self.ctx.state.block_lost = True
            raise BlockLost(
                f"{self.ctx.stage}: the block no longer moves with the gripper (the tip moved "
                f"{tip_mm:.0f} mm, the block {block_mm:.0f} mm at {where}): it is not in the "
                "jaws; not steering it further",
                block_xz=(float(block_xz[0]), float(block_xz[1])),
            )


async def servo_place(ctx: TrialContext) -> Outcome:
    """Visual servo on j0, then depth steps that stop at the first lookup/guard failure."""
    st = ctx.state
    assert st.scene is not None and st.scene.box_xz is not None and st.place_pose is not None
    try:
        await _servo_to(ctx, st.scene.box_xz, "servo_place", _HeldBlockWatch(ctx))
    except BlockLost as exc:
        return await _lost(ctx, exc)
    await _side_frame(ctx, "servo_place_side")
    return Outcome.OK


async def _lost(ctx: TrialContext, exc: BlockLost) -> Outcome:
    """The block left the jaws in the box's neighbourhood: with ``lost_block: judge`` the
    trial goes on to retreat_and_judge, whose judge says where it went (in the box or not);
    the reason stays in the trace and the log. Else the trial stops with the reason. Either
    way the pick judgement is checked against where the block now lies (``_recheck_pick``)."""
    await _recheck_pick(ctx, exc.block_xz)
    if ctx.settings.lost_block != "judge":
        raise exc
    ctx.trace.decision("block_lost", {"why": str(exc), "next": "judge the place"})
    log.warning("block_lost", why=str(exc))
    return Outcome.LOST


async def _recheck_pick(ctx: TrialContext, seen_xz: tuple[float, float] | None) -> None:
    """Was the lost block ever lifted (docs/release.md, "A pick that never lifted the block")?
    Located on the mat's plane, a block lying within ``pick_recheck_mm`` of where the top
    camera saw it right after the lift has not moved since: it lay on the mat beside the
    jaws when the pick was judged "yes" (a block hanging from a jaw's edge and dropped at
    the lift looks held from above), and the pick verdict is revised to "no". A block that
    slipped out on the way lies along the path, hundreds of mm from there."""
    s, st = ctx.settings, ctx.state
    v = st.pick_verdict
    if s.pick_recheck_mm is None or st.lifted_block_xz is None or seen_xz is None:
        return
    if v is None or v.verdict != "yes":
        return
    now = await ctx.eyes.locate_block(0.0, seen_xz, "lost_mat")
    moved = None if now is None else math.dist(now, st.lifted_block_xz) * 1000.0
    entry: dict[str, Any] = {"lifted_xz": list(st.lifted_block_xz),
                             "lost_xz": None if now is None else list(now), "moved_mm": moved}  # fmt: skip
    if now is None or moved is None or moved > s.pick_recheck_mm:
        ctx.trace.decision("pick_recheck", {**entry, "revised": False})
        return
    st.pick_verdict = VerdictObservation(
        "no",
        round(0.9 * v.confidence, 4),
        f"revised: the lost block lies {moved:.0f} mm from where the top "
        f"camera saw it after the lift; it never left the mat (at the lift: {v.reason})",
        "pick_recheck",
        {**entry, "first": v.to_dict()},
    )
    ctx.trace.decision(
        "pick_recheck", {**entry, "revised": True, "pick_verdict": st.pick_verdict.to_dict()}
    )
    log.warning("pick_revised", moved_mm=round(moved, 1), why="the block never left the mat")


async def _side_frame(ctx: TrialContext, tag: str) -> None:
    """The side judgement's frame, from the recorder (any failure = no side image); the request
    runs inside the stage's cancel scope, so leaving the stage cancels it."""
    path, _cap_ts, _reason = ctx.trace.input("side_frame", await ctx.recorder.side_frame(tag))
    ctx.state.side_frame = path


async def _servo_to(
    ctx: TrialContext,
    box_xz: tuple[float, float],
    tag: str,
    seen: _HeldBlockWatch,
    tol_scale: float = 1.0,
) -> None:
    """Steer the held block over ``box_xz`` from ``place_pose``: j0 steps from the camera's x
    error, then depth steps from its z error, each a guarded, bounded, path-checked move; the
    first step that fails a check ends the servo at the last pose that passed (servo_place,
    and each re-aim of a release not confirmed with ``tol_scale`` < 1)."""
    s, st = ctx.settings, ctx.state
    assert st.place_pose is not None
    box_x, box_z = box_xz
    pose = tuple(st.place_pose)
    height = float(st.place_ee_y if st.place_ee_y is not None else fk_tip(pose)[1])
    assert st.pick_ee_y is not None  # the block was grasped at descend_pick's height
    servo: list[dict[str, Any]] = []
    converged = False
    for it in range(1, s.servo_max_iter + 1):
        await ctx.at_rest(f"servo {it}")
        pos = await ctx.eyes.locate_block(height - st.pick_ee_y, (box_x, box_z), f"{tag}_servo{it}")
        if pos is None:
            servo.append({"iter": it, "block_xz": None, "action": "stop: block not visible"})
            break
        seen.check(pos, pose, f"servo {it}")
        diff_mm = (pos[0] - box_x) * 1000.0
        if abs(diff_mm) <= s.servo_tol_mm * tol_scale:
            converged = True
            servo.append(
                {"iter": it, "block_xz": list(pos), "diff_mm": diff_mm, "action": "converged"}
            )
            break
        # −0.151°/mm of the rig, signed by this frame's d(x)/d(j0): the step moves the block toward the box
        step = -_dx_dj0_sign(pose) * s.servo_gain_deg_per_mm * diff_mm
        step = max(-s.servo_step_clamp_deg, min(s.servo_step_clamp_deg, step))
        cand = (pose[0] + step, *pose[1:])
        verdict = check_pose(cand, j1_max=s.j1_max, envelope=ctx.envelope)
        entry = {
            "iter": it,
            "block_xz": list(pos),
            "diff_mm": diff_mm,
            "step_deg": step,
            "j0": cand[0],
        }
        ctx.trace.decision("servo_step", entry)
        if not verdict.ok:
            servo.append({**entry, "action": f"guard stop: {verdict.reason}"})
            break
        _checks, refusal = ctx.motion_checks(cand, near_work=True, into_box=True)
        if refusal is not None:  # stop servoing, as at a guard stop: the block is still held
            servo.append({**entry, "action": f"motion stop: {refusal}"})
            ctx.trace.decision("servo_stop", {"iter": it, "reason": refusal})
            break
        await ctx.move(cand, s.tol_pick_place, f"servo j0 step {it}", near_work=True, into_box=True)
        pose = cand
        st.place_path.append(pose)
        servo.append({**entry, "action": "moved"})
    ctx.trace.decision("servo_result", {"converged": converged, "j0": pose[0]})
    # depth steps: re-run the place lookup at the converged j0 (tip x from FK), correcting z
    lo, hi, _dee = _place_band(ctx)
    for k in range(1, s.depth_steps + 1):
        await ctx.at_rest(f"depth step {k}")
        pos = await ctx.eyes.locate_block(height - st.pick_ee_y, (box_x, box_z), f"{tag}_depth{k}")
        if pos is None:
            servo.append({"depth_step": k, "action": "stop: block not visible"})
            break
        seen.check(pos, pose, f"depth step {k}")
        dz_mm = (pos[1] - box_z) * 1000.0
        if abs(dz_mm) <= s.depth_tol_mm * tol_scale:
            servo.append({"depth_step": k, "dz_mm": dz_mm, "action": "within tolerance"})
            break
        tip = fk_tip(pose)
        aim = (float(tip[0]), float(tip[2]) - dz_mm / 1000.0)
        target, lookup_ok, why, new_height = _depth_target(ctx, pose, aim, (lo, hi), k)
        verdict = check_pose(
            target,
            j1_max=s.j1_max,
            lookup_ok=lookup_ok,
            lookup_reason=why,
            envelope=ctx.envelope,
        )
        stop = None if verdict.ok else verdict.reason
        if stop is None:
            stop = ctx.motion_checks(verdict.angles, near_work=True, into_box=True)[1]
        if stop is not None:
            servo.append({"depth_step": k, "dz_mm": dz_mm, "action": f"guard stop: {stop}"})
            ctx.trace.decision("depth_stop", {"step": k, "reason": stop})
            break
        await ctx.move(
            verdict.angles,
            s.tol_pick_place,
            f"depth step {k}",
            lookup_ok=True,
            near_work=True,
            into_box=True,
        )
        pose = verdict.angles
        st.place_path.append(pose)
        height = float(new_height if new_height is not None else height)
        st.place_ee_y = height
        servo.append({"depth_step": k, "dz_mm": dz_mm, "action": "moved", "angles": list(pose)})
    st.place_pose = pose
    for e in servo:
        ctx.trace.log("servo", e)


def _depth_target(
    ctx: TrialContext,
    pose: tuple[float, ...],
    aim: tuple[float, float],
    band: tuple[float, float],
    k: int,
) -> tuple[tuple[float, ...], bool | None, str, float | None]:
    """A depth step's pose: (angles, lookup_ok for the guard, why not, its tip height).

    With ``depth_step: fine`` the step is solved from the arm's pose with the FK model, the
    way the pick servo's small steps are: the tip moves in z, keeps its x and height, and
    every joint stays near where the servo left it. The place lookup instead snaps to the
    table's rows, whose j0 lies on the table's grid: a row a few mm from the aim can turn j0
    and the forearm's roll by 5-15°, undoing the j0 servo and swinging the block hanging
    under the jaws by 20-30 mm (docs/stages.md, "servo_place"). When no fine step lands,
    the lookup is the fallback."""
    s = ctx.settings
    if s.depth_step == "fine":
        target, _how, why = _fine_step(s, pose, aim, band, where="place")
        ctx.trace.decision(
            "depth_fine",
            {"depth_step": k, "aim_xz": list(aim), "angles": list(target or ()), "why": why},
        )
        if target is not None:
            return target, None, "", float(fk_tip(target)[1])
    res = _place_lookup(ctx, aim, pose, *band)
    ctx.trace.decision("lookup", {"depth_step": k, **res.to_dict()})
    return tuple(res.angles or ()), res.ok, res.reason or "", res.selected_ee_y


async def release(ctx: TrialContext) -> Outcome:
    """Open the gripper over the box, but never blind (docs/release.md).

    With ``release_check`` the block must first be seen inside the opening of the box as
    the top camera finds it now; when it is not, the block is re-aimed at that box at most
    ``release_reaim_max`` times; still not confirmed, the arm lifts to the place approach
    pose holding the block and the operator decides (``ask_release``: with ``--confirm`` a
    terminal prompt, else no): release anyway (back down, then open) or not (the trial
    stops; the exit path puts the block back or holds it, by ``release_refused``).
    """
    s, st = ctx.settings, ctx.state
    if s.release_check:
        try:
            await _check_release(ctx)
        except BlockLost as exc:  # lost while re-aiming: nothing left to release
            return await _lost(ctx, exc)
    await ctx.sleep(s.gripper_settle_s)  # pre-release settle
    await ctx.gripper("open", "release 1")
    await ctx.gripper("open", "release 2")
    st.holding = False
    return Outcome.OK


#: ``ReleaseView.box_method`` when the box is not where detect saw it and not found elsewhere
BOX_GONE = "gone"


def _release_verdict(s: RuntimeSettings, v: ReleaseView) -> tuple[bool, str]:
    """(confirmed, what was seen): the top camera must see the block in most frames with its
    farthest corner ``release_margin_mm`` inside the opening of the box as found in the same
    frames; the side view vetoes only with ``release_side_check`` (docs/release.md, "What each
    camera can see")."""
    if v.top_frames == 0:
        top, top_ok = "no top-camera frames (no mat homography)", False
    elif 2 * v.top_seen <= v.top_frames or v.margin_mm is None:
        unseen = v.top_frames - v.top_seen
        top, top_ok = f"not visible near the box in {unseen} of {v.top_frames} frames", False
    elif v.margin_mm < s.release_margin_mm:
        top, top_ok = (
            f"seen {v.dist_mm or 0.0:.1f} mm from the box centre, {v.margin_mm:.1f} mm inside "
            f"the opening (needs {s.release_margin_mm:g} mm)",
            False,
        )
    else:
        top, top_ok = f"inside the opening by {v.margin_mm:.1f} mm", True
    if v.box_refound and v.box_moved_mm is not None and v.box_moved_mm > BOX_MOVED_MM:
        top += f"; the box was found {v.box_moved_mm:.0f} mm from where detect saw it"
    elif v.box_method == BOX_GONE:  # a block over where the box was is over nothing
        top, top_ok = (
            top + "; the box is gone from where detect saw it (nothing white there)",
            False,
        )
    elif v.top_frames and not v.box_refound and v.box_method:
        top += "; box not found again (hidden, detect's position)"
    side = {"seen": "above the box", "not_seen": "not above the box", "no_frame": "no frame"}[
        v.side
    ]
    if v.side != "seen" and v.side_reason:
        side += f" ({v.side_reason})"
    if not s.release_side_check:
        side += ", advisory"
    ok = top_ok and (v.side != "not_seen" or not s.release_side_check)
    what = "seen above" if ok else "not seen above"
    return ok, f"block {what} the box opening (top: {top}; side: {side})"


def _can_reaim(v: ReleaseView) -> bool:
    """A view worth re-aiming from: the top camera saw the held block near a box it can aim
    at (a block not seen at all may have gone; steering it blind is what the release check
    prevents; a box gone from sight gives nothing to aim at)."""
    seen = v.block_xz is not None and v.margin_mm is not None and 2 * v.top_seen > v.top_frames
    return seen and v.box_method != BOX_GONE


#: a re-aim servos to a tolerance this much tighter than servo_place's (its 8 mm left the
#: block outside the margin, or the box moved)
REAIM_TOL_SCALE = 0.5


async def _check_release(ctx: TrialContext) -> None:
    """Confirm the held block above the opening, re-aim at the box as found, or hover holding
    it and let the operator choose (docs/release.md)."""
    s, st = ctx.settings, ctx.state
    assert st.scene is not None and st.scene.box_xz is not None
    assert st.place_pose is not None and st.place_approach is not None
    assert st.pick_ee_y is not None  # the block was grasped at descend_pick's height
    target = st.scene.box_xz
    seen = _HeldBlockWatch(ctx)
    for attempt in range(s.release_reaim_max + 1):
        await ctx.at_rest("release check")
        lift = float(fk_tip(st.place_pose)[1]) - st.pick_ee_y
        tag = "release_check" if attempt == 0 else f"release_check_reaim{attempt}"
        view = await ctx.eyes.view_release(lift, target, st.side_frame, tag)
        st.release_view = view
        if view.block_xz is not None and _can_reaim(view):  # the watch's sighting too
            seen.check(view.block_xz, st.place_pose, f"release check {attempt + 1}")
        ok, what = _release_verdict(s, view)
        entry: dict[str, Any] = {"confirmed": ok, "why": what, "lift_m": lift}
        if attempt:
            entry["reaim"] = attempt
        ctx.trace.decision("release_check", entry)
        if ok:
            st.release_confirmed = True
            return
        if attempt == s.release_reaim_max or not _can_reaim(view):
            break
        if view.box_refound and view.box_xz is not None:
            target = view.box_xz
        if not await _reaim(ctx, view, target, attempt + 1, seen):
            break
        await _side_frame(ctx, f"release_reaim{attempt + 1}_side")
    st.release_refused = what
    log.warning("release_refused", reason=what)
    await ctx.retrace(
        [*reversed(st.place_path[:-1]), st.place_approach],
        s.tol_pick_place,
        "release refused: hover",
    )
    st.hovering = True
    ans = await ctx.eyes.ask_release(what, "release_confirm")
    anyway = ans.verdict == "yes"
    ctx.trace.decision("release_override", {"release": anyway, "answer": ans.reason})
    if not anyway:
        _learn_failed_place(ctx, "refused")
        raise StageFailed(f"release refused: {what}; {ans.reason}")
    st.release_refused = ""
    log.warning("release_anyway", reason=what, answer=ans.reason)
    await ctx.retrace(
        st.place_path or [st.place_pose], s.tol_pick_place, "release anyway: back down"
    )
    st.hovering = False


async def _reaim(
    ctx: TrialContext,
    view: ReleaseView,
    target: tuple[float, float],
    n: int,
    seen: _HeldBlockWatch,
) -> bool:
    """One re-aim of a release not confirmed (docs/release.md, "Re-aim, then ask, then put
    back"): up the way in to the hover, clear of the rim (steering at the place height drags
    a low-hanging block along the box's wall), a new descent at the box as found, then the
    place servo's steps at half its tolerance. The descent is descend_place's own lookup
    (from the approach pose, within its joint tolerance, the floor, the continuity bound);
    False when it has no pose (the re-aims end). The held-block watch compares the first
    sighting after the descent with the view before the re-aim: a block that stayed while
    the tip went up, over and down again is not in the jaws (it lies in or by the box)."""
    s, st = ctx.settings, ctx.state
    assert st.place_approach is not None and st.place_pose is not None
    assert view.block_xz is not None
    aim = target
    entry = {"attempt": n, "box_xz": list(target), "block_xz": list(view.block_xz)}
    ctx.trace.decision("release_reaim", entry)
    log.info("release_reaim", attempt=n, box_xz=target)
    await ctx.retrace(
        [*reversed(st.place_path[:-1]), st.place_approach], s.tol_pick_place, f"re-aim {n}: up"
    )
    lo, hi, _dee = _place_band(ctx)
    res = _place_lookup(ctx, aim, st.place_approach, lo, hi)
    ctx.trace.decision("lookup", {"reaim": n, **res.to_dict()})
    if not res.ok or res.angles is None:
        ctx.trace.decision("release_reaim_stop", {"attempt": n, "reason": res.reason})
        # back down the way it came up, so the refusal's hover below starts from the place
        await ctx.retrace(st.place_path, s.tol_pick_place, f"re-aim {n}: back down")
        return False
    await ctx.move(
        res.angles,
        s.tol_pick_place,
        f"re-aim {n}: descend",
        lookup_ok=res.ok,
        near_work=True,
        into_box=True,
    )
    st.place_pose, st.place_ee_y = tuple(res.angles), res.selected_ee_y
    st.place_path = [st.place_pose]
    await _servo_to(ctx, target, f"release_reaim{n}", seen, REAIM_TOL_SCALE)
    return True


async def look_at_jaws(ctx: TrialContext) -> str:
    """``seen`` / ``not_seen``: the top camera's look for the held block at the tip, where
    the kinematic model puts it (the same search as the place servo's, traced as an input)."""
    st = ctx.state
    pose = ctx.last_commanded or ctx.last_measured
    if pose is None or st.pick_ee_y is None:
        return "unknown"
    await ctx.at_rest("held block check")
    tip = fk_tip(pose)
    lift = float(tip[1]) - st.pick_ee_y
    xz = (float(tip[0]), float(tip[2]))
    pos = await ctx.eyes.locate_block(lift, xz, "held_check")
    # a red block elsewhere on the mat is not the one in the jaws
    near = pos is not None and math.dist(pos, xz) * 1000.0 <= HELD_NEAR_TIP_MM
    ctx.trace.decision("held_block_check", {"seen": near, "block_xz": pos, "tip_xz": list(xz)})
    st.held_evidence = "seen" if near else "not_seen"
    return st.held_evidence


#: a block seen this close (x-z) to where the model puts the tip counts as the held one: the
#: real tip sits up to ~25 mm from the model's (docs/stages.md, "The pick servo"), the held
#: block's centre another half block from the tip
HELD_NEAR_TIP_MM = 50.0


def _learn_failed_place(ctx: TrialContext, outcome: str) -> None:
    """A place that did not happen teaches too (docs/release.md, "Every trial teaches"):
    ``lost`` (the block stopped moving with the tip in the box: it caught on the box) raises
    the cell's place height one step; ``refused`` counts the cell and keeps its height (what
    kept the block out was measured in x-z, which the servo and the re-aim act on)."""
    s, st = ctx.settings, ctx.state
    if s.height_rule == "failures" or not s.learn_failed_places or not st.place_key:
        return
    view = st.release_view
    up = ctx.heights.learn_failed(
        st.place_key,
        outcome,
        None if view is None else view.margin_mm,
        step_mm=s.height_lost_step_mm if outcome == "lost" else s.height_step_mm,
        max_mm=s.height_lost_max_mm
        if outcome == "lost" and s.height_lost_max_mm is not None
        else s.height_max_mm,
        start_mm=st.place_dee_start_mm,
    )
    ctx.trace.decision("height_update", {"key": st.place_key, outcome: True, **up.to_dict()})
    log.info("height_update", key=st.place_key, outcome=outcome, change=up.change, why=up.why)


async def retreat_and_judge(ctx: TrialContext) -> Outcome:
    s, st = ctx.settings, ctx.state
    assert st.place_approach is not None
    if not st.hovering:  # else already up at the place approach pose (a lost block, found so there)
        await ctx.retrace(
            [*reversed(st.place_path[:-1]), st.place_approach], s.tol_pick_place, "retreat up"
        )
    st.hovering = False
    swept = (s.swept_j0, *st.place_approach[1:])
    await ctx.move(swept, s.tol_pick_place, "swept retreat")
    await ctx.at_rest("place judgement")
    v = await ctx.eyes.judge_place(st.side_frame, "retreat_judge")
    st.place_verdict = v
    placed = v.verdict == "yes"
    if st.block_lost:  # the height memory learnt from the loss already (_learn_failed_place)
        return Outcome.OK
    if s.height_rule == "failures":  # before the measured rule: raise after a failure only
        dee = ctx.heights.update(st.place_key, placed, s.height_step_mm, s.height_max_mm)
        ctx.trace.decision(
            "height_update", {"key": st.place_key, "placed_ok": placed, "dee_y_mm": dee}
        )
        return Outcome.OK
    # measured at the release (the release check's top view), only when it was confirmed
    view = st.release_view if st.release_confirmed else None
    up = ctx.heights.learn(
        st.place_key,
        placed,
        None if view is None else view.margin_mm,
        step_mm=s.height_step_mm,
        max_mm=s.height_max_mm,
        raise_margin_mm=s.height_raise_margin_mm,
        start_mm=st.place_dee_start_mm,
    )
    dist = None if view is None else view.dist_mm
    ctx.trace.decision(
        "height_update",
        {"key": st.place_key, "placed_ok": placed, "dist_mm": dist, **up.to_dict()},
    )
    log.info(
        "height_update",
        line=f"update {st.place_key} dist="
        + ("unmeasured" if dist is None else f"{dist:.1f}mm")
        + f" placed={'yes' if placed else 'no'} → dee_y={up.dee_y_mm:.1f}mm (n={up.n})",
        key=st.place_key,
        dist_mm=dist,
        margin_mm=up.margin_mm,
        change=up.change,
        why=up.why,
    )
    return Outcome.OK


async def return_home(ctx: TrialContext) -> Outcome:
    s, st = ctx.settings, ctx.state
    assert st.place_approach is not None
    await ctx.move(st.place_approach, s.tol_pick_place, "back to approach_place", lookup_ok=True)
    await ctx.move(s.home, s.tol_home, "home")
    await ctx.arm.set_fresh_mode(0)
    st.fresh_mode_on = False
    ctx.trace.decision("fresh_mode", 0)
    return Outcome.OK


BODIES: dict[Stage, Callable[[TrialContext], Awaitable[Outcome]]] = {
    Stage.OPEN_GRIPPER_HOME: open_gripper_home, Stage.DETECT: detect, Stage.CORRECT_AIM: correct_aim,
    Stage.APPROACH_PICK: approach_pick, Stage.DESCEND_PICK: descend_pick, Stage.GRASP: grasp,
    Stage.LIFT_AND_JUDGE: lift_and_judge, Stage.RETRY_PICK: retry_pick, Stage.APPROACH_PLACE: approach_place,
    Stage.DESCEND_PLACE: descend_place, Stage.SERVO_PLACE: servo_place, Stage.RELEASE: release,
    Stage.RETREAT_AND_JUDGE: retreat_and_judge, Stage.RETURN_HOME: return_home,
}  # fmt: skip


# ==================================================================== driver


async def _run_body(
    ctx: TrialContext, stage: Stage, force: asyncio.Event | anyio.Event | None
) -> tuple[Outcome, str]:
    """Run one stage body in its own task group; a set ``force`` cancels it at once.

    The body runs in this task (so its errors come out as themselves, not wrapped in
    an exception group); the task group holds the force watcher and is the stage's
    cancel scope. Errors that are not StageFailed (daemon lost, refusal, camera)
    become the abort reason, named.
    """
    forced = False
    outcome, reason = Outcome.FAIL, ""
    async with anyio.create_task_group() as tg:
        if force is not None:
            event = force

            async def watch() -> None:
                nonlocal forced
                await event.wait()
                forced = True
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
        try:
            outcome = await BODIES[stage](ctx)
        except (StageFailed, MotionRefused) as exc:
            outcome, reason = Outcome.FAIL, str(exc)
        except Exception as exc:  # daemon lost, refusal, camera failure: abort with its name
            outcome, reason = Outcome.FAIL, f"{stage.value}: {_describe_error(exc)}"
        finally:
            tg.cancel_scope.cancel()  # the watcher, and anything else the stage left running
    if forced:  # whatever the cancelled body raised on its way out, the operator stopped it
        outcome, reason = Outcome.FAIL, f"forced stop during {stage.value} (operator)"
    return outcome, reason


async def run_stages(
    ctx: TrialContext, force: asyncio.Event | anyio.Event | None = None
) -> tuple[Stage, str]:
    """Run from the first stage until DONE or ABORT; return (last stage reached, abort reason or "")."""
    stage = Stage.OPEN_GRIPPER_HOME
    while stage not in (Stage.DONE, Stage.ABORT):
        ctx.stage = stage
        ctx.trace.stage = stage.value
        ctx.recorder.stage(stage.value)
        if ctx.on_stage_start is not None:
            ctx.on_stage_start(stage.value)
        t0 = time.monotonic()
        # a storage fault ends the trial at the next stage boundary through the exit path,
        # but never while the block is in the gripper: the place goes on to the release
        problem = None if ctx.state.holding else ctx.storage_fault()
        if problem is not None:
            outcome, reason = Outcome.FAIL, f"storage ({problem})"
            log.error("storage_fault", stage=stage.value, reason=problem)
        else:
            outcome, reason = await _run_body(ctx, stage, force)
        elapsed = time.monotonic() - t0
        ctx.state.stage_times[stage.value] = ctx.state.stage_times.get(stage.value, 0.0) + elapsed
        nxt = next_stage(stage, outcome)
        ctx.trace.log("stage_time", {"stage": stage.value, "duration_s": round(elapsed, 4)})
        ctx.trace.write(
            "transition", frm=stage.value, to=nxt.value, outcome=outcome.value, reason=reason
        )
        log.info(
            "stage_done",
            stage=stage.value,
            outcome=outcome.value,
            next=nxt.value,
            reason=reason or None,
            duration_s=round(elapsed, 3),
        )
        if ctx.on_stage is not None:
            ctx.on_stage(stage.value, outcome.value, reason)
        if nxt is Stage.ABORT:
            return stage, reason
        stage = nxt
    return Stage.DONE, ""


def _describe_error(exc: BaseException) -> str:
    from mecharm_runtime.client import (
        ArmNoReply,
        ArmRefused,
        ConnectionLost,
        DaemonBusy,
        DaemonTimeout,
    )

    kinds = {
        ConnectionLost: "daemon connection lost",
        DaemonTimeout: "daemon timeout",
        DaemonBusy: "daemon busy",
        ArmRefused: "arm refused the command",
        ArmNoReply: "arm no reply",
    }
    for cls, label in kinds.items():
        if isinstance(exc, cls):
            return f"{label}: {exc}"
    return f"{type(exc).__name__}: {exc}"
