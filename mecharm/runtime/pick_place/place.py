"""The place phase: over the box's wall, down into it, the place servo with its held-block
watch (docs/stages.md, docs/release.md)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from mecharm.common.kinematics import fk_tip
from mecharm.common.logging import get_logger
from mecharm.runtime.engine import Outcome, StageFailed
from mecharm.runtime.guard import check_pose
from mecharm.runtime.lookup.fk_lookup import FkLookupResult, fk_lookup
from mecharm.runtime.lookup.j0 import j0_lookup
from mecharm.runtime.memories import cell_key
from mecharm.runtime.pick_place.context import BlockLost, TrialContext
from mecharm.runtime.pick_place.pick import _fine_step, _solve_tip, _step_bound
from mecharm.runtime.ports import (
    VerdictObservation,
)

log = get_logger("mecharm.runtime.pick_place.place")

#: the settings this module reads (docs/settings.md, "What each stage reads"; a test
#: checks it against the code)
SETTINGS_READ: frozenset[str] = frozenset({
    "pick_place.cell_mm", "pick_place.depth_steps", "pick_place.depth_tol_mm", "pick_place.dist_max_m", "pick_place.height_lost_max_mm",
    "pick_place.height_lost_step_mm", "pick_place.height_max_mm", "pick_place.height_start_mm", "pick_place.height_step_mm", "arm.j1_max",
    "pick_place.pick_recheck_mm", "pick_place.place_approach_above_band_mm", "pick_place.place_band", "pick_place.place_band_depth_m",
    "pick_place.place_floor_m", "pick_place.place_joint_tol", "pick_place.place_target_m", "pick_place.servo_drop_still_mm",
    "pick_place.servo_drop_tip_mm", "pick_place.servo_gain_deg_per_mm", "pick_place.servo_max_iter", "pick_place.servo_step_clamp_deg",
    "pick_place.servo_tol_mm", "motion.tol_pick_place", "pick_place.z_resid_warn_m"
})  # fmt: skip


async def approach_place(ctx: TrialContext) -> Outcome:
    s = ctx.settings
    st = ctx.state
    assert st.scene is not None and st.scene.box_xz is not None
    res = j0_lookup(ctx.arc_place, st.scene.box_xz)
    ctx.trace.decision("lookup", {"phase": "approach_place", **res.to_dict()})
    if not res.ok:
        raise StageFailed(f"{ctx.stage}: j0 lookup out_of_range: {res.reason}")
    if abs(res.resid_z) > s.pick_place.z_resid_warn_m:
        log.warning(
            "place_z_residual_large", resid_z=res.resid_z, limit=s.pick_place.z_resid_warn_m
        )
        ctx.trace.decision(
            "z_residual_warning", {"resid_z": res.resid_z, "limit": s.pick_place.z_resid_warn_m}
        )
    pose = _raised_approach(ctx, tuple(res.angles), st.scene.box_xz)
    await ctx.move(pose, s.motion.tol_pick_place, "approach_place", lookup_ok=True)
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
    st.place_key = cell_key("place", *box_xz, s.pick_place.cell_mm)
    _lo, hi, dee = _place_band(ctx)
    want = hi + s.pick_place.place_approach_above_band_mm / 1000.0
    q0 = np.asarray(arc_pose, dtype=np.float64)
    tip0 = np.asarray(fk_tip(q0))
    if float(tip0[1]) >= want:
        return arc_pose
    goal = np.array([float(tip0[0]), want, float(tip0[2])])
    q = _solve_tip(q0, goal, _RAISE_BOX_DEG, s.arm.j1_max)
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


def _place_band(ctx: TrialContext) -> tuple[float, float, float | None]:
    """(band_min, band_max, dee_y_mm): memory target 0.100 + dee_y, band the 30 mm below it."""
    s, st = ctx.settings, ctx.state
    dee = ctx.heights.get(st.place_key)
    if dee is None:  # a new cell starts at the highest learnt cell (docs/runtime.md, "Memories")
        dee = ctx.heights.highest()
        st.place_dee_start_mm = dee or 0.0
    if dee is None and s.pick_place.height_start_mm > 0:  # nothing learnt anywhere yet
        dee = st.place_dee_start_mm = s.pick_place.height_start_mm
    if dee is None:
        return s.pick_place.place_band[0], s.pick_place.place_band[1], None
    target = s.pick_place.place_target_m + dee / 1000.0
    return target - s.pick_place.place_band_depth_m, target, dee


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
        dist_max=s.pick_place.dist_max_m,
        ref_joints=ref,
        joint_tol=s.pick_place.place_joint_tol,
        ee_y_floor=s.pick_place.place_floor_m,
        **_step_bound(s, ref),
    )


async def descend_place(ctx: TrialContext) -> Outcome:
    s, st = ctx.settings, ctx.state
    assert st.scene is not None and st.scene.box_xz is not None and st.place_approach is not None
    st.place_key = cell_key("place", *st.scene.box_xz, s.pick_place.cell_mm)
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
        s.motion.tol_pick_place,
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
        if last is None:
            return
        tip_mm = math.dist(tip_xz, last[1]) * 1000.0
        block_mm = math.dist(block_xz, last[0]) * 1000.0
        if tip_mm < s.pick_place.servo_drop_tip_mm:
            return
        info = {"where": where, "tip_moved_mm": tip_mm, "block_moved_mm": block_mm}
        still = block_mm < s.pick_place.servo_drop_still_mm
        if block_mm < tip_mm / 3.0 and not still:
            # the block moved, less than the tip: not the evidence of a block lying still that
            # "not in the jaws" needs (a held block partly hidden by the wrist looks so); the
            # servo goes on, the next sighting and the release check look again
            self.ctx.trace.decision("held_block_lagged", info)
        elif block_mm < tip_mm / 3.0:
            self.ctx.trace.decision("held_block_lost", info)
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
    """The block left the jaws in the box's neighbourhood: the trial goes on to
    retreat_and_judge, whose judge says where it went (in the box or not); the reason stays
    in the trace and the log. The pick judgement is checked against where the block now lies (``_recheck_pick``);
    a block lost on the box teaches the height memory, one that never left the mat does not
    (it says nothing about the height the block hung at)."""
    if not await _recheck_pick(ctx, exc.block_xz):
        _learn_failed_place(ctx, "lost")
    ctx.trace.decision("block_lost", {"why": str(exc), "next": "judge the place"})
    log.warning("block_lost", why=str(exc))
    return Outcome.LOST


#: the judge named by a pick verdict revised from later evidence (``_recheck_pick``)
PICK_RECHECK = "pick_recheck"


async def _recheck_pick(ctx: TrialContext, seen_xz: tuple[float, float] | None) -> bool:
    """Was the lost block ever lifted (docs/release.md, "A pick that never lifted the block")?
    Located on the mat's plane, a block lying within ``pick_recheck_mm`` of where the top
    camera saw it right after the lift has not moved since: it lay on the mat beside the
    jaws when the pick was judged "yes" (a block hanging from a jaw's edge and dropped at
    the lift looks held from above), and the pick verdict is revised to "no". A block that
    slipped out on the way lies along the path, hundreds of mm from there. True: revised."""
    s, st = ctx.settings, ctx.state
    v = st.pick_verdict
    if st.lifted_block_xz is None or seen_xz is None:
        return False
    if v is None or v.verdict != "yes":
        return False
    now = await ctx.eyes.locate_block(0.0, seen_xz, "lost_mat")
    moved = None if now is None else math.dist(now, st.lifted_block_xz) * 1000.0
    entry: dict[str, Any] = {"lifted_xz": list(st.lifted_block_xz),
                             "lost_xz": None if now is None else list(now), "moved_mm": moved}  # fmt: skip
    if now is None or moved is None or moved > s.pick_place.pick_recheck_mm:
        ctx.trace.decision("pick_recheck", {**entry, "revised": False})
        return False
    st.pick_verdict = VerdictObservation(
        "no",
        round(0.9 * v.confidence, 4),
        f"revised: the lost block lies {moved:.0f} mm from where the top "
        f"camera saw it after the lift; it never left the mat (at the lift: {v.reason})",
        PICK_RECHECK,
        {**entry, "first": v.to_dict()},
    )
    ctx.trace.decision(
        "pick_recheck", {**entry, "revised": True, "pick_verdict": st.pick_verdict.to_dict()}
    )
    log.warning("pick_revised", moved_mm=round(moved, 1), why="the block never left the mat")
    return True


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
    for it in range(1, s.pick_place.servo_max_iter + 1):
        await ctx.at_rest(f"servo {it}")
        pos = await ctx.eyes.locate_block(height - st.pick_ee_y, (box_x, box_z), f"{tag}_servo{it}")
        if pos is None:
            servo.append({"iter": it, "block_xz": None, "action": "stop: block not visible"})
            break
        seen.check(pos, pose, f"servo {it}")
        diff_mm = (pos[0] - box_x) * 1000.0
        if abs(diff_mm) <= s.pick_place.servo_tol_mm * tol_scale:
            converged = True
            servo.append(
                {"iter": it, "block_xz": list(pos), "diff_mm": diff_mm, "action": "converged"}
            )
            break
        # −0.151°/mm of the rig, signed by this frame's d(x)/d(j0): the step moves the block toward the box
        step = -_dx_dj0_sign(pose) * s.pick_place.servo_gain_deg_per_mm * diff_mm
        step = max(-s.pick_place.servo_step_clamp_deg, min(s.pick_place.servo_step_clamp_deg, step))
        cand = (pose[0] + step, *pose[1:])
        verdict = check_pose(cand, j1_max=s.arm.j1_max, envelope=ctx.envelope)
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
        await ctx.move(
            cand, s.motion.tol_pick_place, f"servo j0 step {it}", near_work=True, into_box=True
        )
        pose = cand
        st.place_path.append(pose)
        servo.append({**entry, "action": "moved"})
    ctx.trace.decision("servo_result", {"converged": converged, "j0": pose[0]})
    # depth steps: re-run the place lookup at the converged j0 (tip x from FK), correcting z
    lo, hi, _dee = _place_band(ctx)
    for k in range(1, s.pick_place.depth_steps + 1):
        await ctx.at_rest(f"depth step {k}")
        pos = await ctx.eyes.locate_block(height - st.pick_ee_y, (box_x, box_z), f"{tag}_depth{k}")
        if pos is None:
            servo.append({"depth_step": k, "action": "stop: block not visible"})
            break
        seen.check(pos, pose, f"depth step {k}")
        dz_mm = (pos[1] - box_z) * 1000.0
        if abs(dz_mm) <= s.pick_place.depth_tol_mm * tol_scale:
            servo.append({"depth_step": k, "dz_mm": dz_mm, "action": "within tolerance"})
            break
        tip = fk_tip(pose)
        aim = (float(tip[0]), float(tip[2]) - dz_mm / 1000.0)
        target, lookup_ok, why, new_height = _depth_target(ctx, pose, aim, (lo, hi), k)
        verdict = check_pose(
            target,
            j1_max=s.arm.j1_max,
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
            s.motion.tol_pick_place,
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

    The step is solved from the arm's pose with the FK model, the
    way the pick servo's small steps are: the tip moves in z, keeps its x and height, and
    every joint stays near where the servo left it. The place lookup instead snaps to the
    table's rows, whose j0 lies on the table's grid: a row a few mm from the aim can turn j0
    and the forearm's roll by 5-15°, undoing the j0 servo and swinging the block hanging
    under the jaws by 20-30 mm (docs/stages.md, "servo_place"). When no fine step lands,
    the lookup is the fallback."""
    target, _how, why = _fine_step(ctx.settings, pose, aim, band, where="place")
    ctx.trace.decision(
        "depth_fine",
        {"depth_step": k, "aim_xz": list(aim), "angles": list(target or ()), "why": why},
    )
    if target is not None:
        return target, None, "", float(fk_tip(target)[1])
    res = _place_lookup(ctx, aim, pose, *band)
    ctx.trace.decision("lookup", {"depth_step": k, **res.to_dict()})
    return tuple(res.angles or ()), res.ok, res.reason or "", res.selected_ee_y


def _learn_failed_place(ctx: TrialContext, outcome: str) -> None:
    """A place that did not happen teaches too (docs/release.md, "Every trial teaches"):
    ``lost`` (the block stopped moving with the tip in the box: it caught on the box) raises
    the cell's place height one step; ``refused`` counts the cell and keeps its height (what
    kept the block out was measured in x-z, which the servo and the re-aim act on)."""
    s, st = ctx.settings, ctx.state
    if not st.place_key:
        return
    view = st.release_view
    up = ctx.heights.learn_failed(
        st.place_key,
        outcome,
        None if view is None else view.margin_mm,
        step_mm=s.pick_place.height_lost_step_mm
        if outcome == "lost"
        else s.pick_place.height_step_mm,
        max_mm=s.pick_place.height_lost_max_mm if outcome == "lost" else s.pick_place.height_max_mm,
        start_mm=st.place_dee_start_mm,
    )
    ctx.trace.decision("height_update", {"key": st.place_key, outcome: True, **up.to_dict()})
    log.info("height_update", key=st.place_key, outcome=outcome, change=up.change, why=up.why)
    if outcome == "lost" and up.change == "raise":
        raised = ctx.heights.raise_floor(up.dee_y_mm)
        if raised:
            ctx.trace.decision(
                "height_floor",
                {"floor_mm": up.dee_y_mm, "raised": {k: list(v) for k, v in raised.items()}},
            )
            log.info("height_floor", floor_mm=up.dee_y_mm, cells=len(raised))
