"""The pick phase: HOME and open, detect, aim, approach, descend (with the pick servo),
grasp, lift and judge, retry (docs/stages.md).

One concern: the pick phase's stage bodies and the helpers only they use (the place and the
release are in their own modules).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import anyio
import numpy as np
from numpy.typing import NDArray

from mecharm.common.kinematics import fk_tip
from mecharm.common.logging import get_logger
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.engine import Outcome, StageFailed
from mecharm.runtime.guard import check_pose
from mecharm.runtime.lookup.descent import PickDescent, pick_descent_table, plan_pick_descent
from mecharm.runtime.lookup.fk_lookup import FkLookupResult, fk_lookup
from mecharm.runtime.lookup.j0 import j0_lookup
from mecharm.runtime.memories import cell_key
from mecharm.runtime.pick_place.context import TrialContext, TrialState
from mecharm.runtime.ports import (
    TipObservation,
)

log = get_logger("mecharm.runtime.pick_place.pick")

#: the settings this module reads (docs/settings.md, "What each stage reads"; a test
#: checks it against the code)
SETTINGS_READ: frozenset[str] = frozenset({
    "pick_place.cell_mm", "pick_place.dist_max_m", "pick_place.ema_alpha", "arm.home", "arm.j1_max", "arm.joint_step_max_deg",
    "pick_place.max_correction_mm", "pick_place.max_pick_attempts", "pick_place.pick_band", "pick_place.pick_hover_band",
    "pick_place.pick_hover_dist_m", "pick_place.pick_redescend_mm", "pick_place.pick_resid_max_m", "pick_place.pick_retry_band",
    "pick_place.pick_servo_max_iter", "pick_place.pick_servo_step_mm", "pick_place.pick_servo_tol_mm", "pick_place.pick_tip_height_mm",
    "motion.tol_approach", "motion.tol_home", "motion.tol_lift_to_arc", "motion.tol_pick_place", "pick_place.x_resid_thresh_m"
})  # fmt: skip


async def open_gripper_home(ctx: TrialContext) -> Outcome:
    s = ctx.settings
    await ctx.arm.set_fresh_mode(1)
    ctx.state.fresh_mode_on = True
    ctx.trace.decision("fresh_mode", 1)
    cur = await ctx.read()
    away = max(abs(a - h) for a, h in zip(cur, s.arm.home, strict=True))
    need_home = away > s.motion.tol_home
    ctx.trace.decision("home_needed", {"max_delta": away, "needed": need_home})
    if need_home:
        await ctx.move(s.arm.home, s.motion.tol_home, "home")
    await ctx.gripper("open", "initial open")
    return Outcome.OK


async def detect(ctx: TrialContext) -> Outcome:
    obs = await ctx.eyes.observe_scene(f"detect_attempt{ctx.state.pick_attempts + 1}")
    if not obs.ok or obs.block_xz is None or obs.box_xz is None:
        raise StageFailed(f"{ctx.stage}: detection failed: {obs.reason or 'no block/box'}")
    if not obs.box_trusted:  # never in traces from before the flag: they read as trusted
        ctx.trace.decision("box_untrusted", {"doubt": obs.box_doubt, "proceed": False})
        raise StageFailed(f"{ctx.stage}: {obs.box_doubt or 'box detection not trusted'}")
    ctx.state.scene = obs
    return Outcome.OK


async def correct_aim(ctx: TrialContext) -> Outcome:
    s = ctx.settings
    assert ctx.state.scene is not None and ctx.state.scene.block_xz is not None
    bx, bz = ctx.state.scene.block_xz
    key = cell_key("pick", bx, bz, s.pick_place.cell_mm)
    entry = ctx.corrections.get(key)
    dx = dz = 0.0
    if entry is not None:
        lim = s.pick_place.max_correction_mm
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
    if abs(res.resid_x) > s.pick_place.x_resid_thresh_m:
        raise StageFailed(
            f"{ctx.stage}: x residual {res.resid_x:.3f} m > {s.pick_place.x_resid_thresh_m} m"
        )
    await ctx.move(res.angles, s.motion.tol_approach, "approach_pick", lookup_ok=True)
    ctx.state.pick_approach = tuple(res.angles)
    return Outcome.OK


async def descend_pick(ctx: TrialContext) -> Outcome:
    s = ctx.settings
    st = ctx.state
    st.pick_hover = False  # approach_pick has just set pick_approach to the arc's pose
    st.pick_servo_mm = (0.0, 0.0)
    await _descend(ctx, "pick descend", "descend_pick")
    if s.pick_place.pick_servo_max_iter > 0:
        await _servo_pick(ctx, "descend_pick")
        if _redescent_wanted(ctx):
            await _redescend(ctx)
    return Outcome.OK


async def _descend(ctx: TrialContext, note: str, tag: str) -> None:
    """From the pick approach pose (the arc's, or a hover) down to the aim in the pick band
    (the move named ``note``), then the top camera's tip measurement at rest (its capture
    named ``tag``). Raises StageFailed when no pose reaches the aim (before anything moved)."""
    s, st = ctx.settings, ctx.state
    assert st.aim_xz is not None and st.scene is not None and st.scene.block_xz is not None
    if _step_bound(s, st.pick_approach):
        res = await _bounded_pick(ctx)
    else:
        res = fk_lookup(
            ctx.table, "pick", st.aim_xz, *_pick_band(ctx), dist_max=s.pick_place.dist_max_m
        )
        ctx.trace.decision("lookup", res.to_dict())
    if (not res.ok or res.angles is None) and st.height_miss:
        # no row in the retry band reaches the block from here: the whole band, as before
        ctx.trace.decision("height_retry_band", {"reachable": False, "reason": res.reason})
        st.height_miss = False
        return await _descend(ctx, note, tag)
    if not res.ok or res.angles is None:
        raise StageFailed(f"{ctx.stage}: fk lookup out_of_range: {res.reason}")
    await ctx.move(
        res.angles,
        s.motion.tol_pick_place,
        note,
        lookup_ok=res.ok,
        lookup_reason=res.reason or "",
        near_work=True,
    )
    st.pick_pose, st.pick_ee_y = tuple(res.angles), res.selected_ee_y
    st.pick_path = [st.pick_pose]
    await ctx.at_rest("tip measurement")
    st.tip = await ctx.eyes.measure_tip(
        st.scene.block_xz,
        float(res.selected_ee_y or _pick_band(ctx)[0]) + s.pick_place.pick_tip_height_mm / 1000.0,
        f"{tag}_tip",
    )


def _redescent_wanted(ctx: TrialContext) -> bool:
    """The servo ended with the tip still measured farther than ``pick_redescend_mm`` from
    the block: a grasp there misses (docs/stages.md, "The pick servo")."""
    s, st = ctx.settings, ctx.state
    tip = st.tip
    return (
        tip is not None
        and tip.ok
        and math.isfinite(tip.dist_mm)
        and tip.dist_mm > s.pick_place.pick_redescend_mm
    )


async def _redescend(ctx: TrialContext) -> None:
    """Up the way the arm came, then the descent again at the aim moved by the measured
    offset (one servo step: bounded per step and in total), then the servo again. Nothing
    left to step (the total bound) or no pose for the new aim: back down to where the arm
    was, and the grasp there, as without the re-descent."""
    s, st = ctx.settings, ctx.state
    assert st.tip is not None and st.scene is not None and st.scene.block_xz is not None
    tip = st.tip
    step, why = _pick_servo_step(s, tip, st.correction_used_mm, st.pick_servo_mm)
    entry: dict[str, Any] = {"tip_mm": round(tip.dist_mm, 2), "tip_dx_mm": tip.dx_mm,
                             "tip_dz_mm": tip.dz_mm}  # fmt: skip
    if step is None:
        ctx.trace.decision("pick_redescend", {**entry, "used": False, "why": why})
        return
    total, aim = _stepped_aim(st, step)
    ctx.trace.decision(
        "pick_redescend",
        {**entry, "used": True, "step_mm": list(step), "total_mm": list(total),
         "aim_xz": list(aim)},
    )  # fmt: skip
    log.info("pick_redescend", tip_mm=round(tip.dist_mm, 1), step_mm=[round(v, 1) for v in step])
    before = (st.aim_xz, st.pick_servo_mm, st.pick_pose, st.pick_ee_y, st.pick_path, st.tip)
    await up_from_mat(ctx, "re-descend: up from the block")
    st.aim_xz, st.pick_servo_mm = aim, total
    try:
        await _descend(ctx, "pick descend again", "descend_pick_again")
    except StageFailed as exc:
        st.aim_xz, st.pick_servo_mm, st.pick_pose, st.pick_ee_y, st.pick_path, st.tip = before
        ctx.trace.decision("pick_redescend_refused", {"reason": str(exc)})
        log.warning("pick_redescend_refused", reason=str(exc))
        await lower_to_mat(ctx, "re-descend refused", at_approach=True)
        return
    await _servo_pick(ctx, "descend_pick_again")


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
    if dist <= s.pick_place.pick_servo_tol_mm:
        return None, "within tolerance"
    k = min(1.0, s.pick_place.pick_servo_step_mm / dist)
    want = (tip.dx_mm * k, tip.dz_mm * k)
    lim = s.pick_place.max_correction_mm
    step = tuple(
        max(-lim, min(lim, u + d + w)) - (u + d) for u, d, w in zip(used, done, want, strict=True)
    )
    if math.hypot(*step) < 0.5:
        return None, (
            f"total bound: the aim is already max_correction_mm {lim:g} mm from the block "
            f"(memory {used[0]:+.1f}/{used[1]:+.1f} mm, servo {done[0]:+.1f}/{done[1]:+.1f} mm)"
        )
    return (step[0], step[1]), "step"


def _stepped_aim(
    st: TrialState, step: tuple[float, float]
) -> tuple[tuple[float, float], tuple[float, float]]:
    """(the servo's total after ``step``, mm; the aim it gives, m): the detected block minus
    the memory's correction and every servo step so far."""
    assert st.scene is not None and st.scene.block_xz is not None
    bx, bz = st.scene.block_xz
    total = (st.pick_servo_mm[0] + step[0], st.pick_servo_mm[1] + step[1])
    used = st.correction_used_mm
    return total, (bx - (used[0] + total[0]) / 1000.0, bz - (used[1] + total[1]) / 1000.0)


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
    box = s.arm.joint_step_max_deg if s.arm.joint_step_max_deg > 0 else 180.0
    q = _solve_tip(q0, goal, box, s.arm.j1_max)
    tip = np.asarray(fk_tip(q))
    resid = float(math.hypot(tip[0] - aim[0], tip[2] - aim[1]))
    if not all(math.isfinite(v) for v in q) or resid > max(s.pick_place.pick_resid_max_m, way / 2):
        return (
            None,
            "fine",
            (
                f"no fine step within the joint bound lands within {s.pick_place.pick_resid_max_m * 1000:g} mm "
                f"of the aim or halfway to it ({resid * 1000:.1f} mm off)"
            ),
        )
    if not band[0] <= float(tip[1]) < band[1]:
        return None, "fine", f"fine step leaves the {where} band (ee_y {float(tip[1]):.3f} m)"
    return tuple(round(float(v), 3) for v in q), "fine", None


async def _servo_pick(ctx: TrialContext, tag: str) -> None:
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
    for it in range(1, s.pick_place.pick_servo_max_iter + 1):
        tip = st.tip
        step, why = _pick_servo_step(s, tip, st.correction_used_mm, st.pick_servo_mm)
        entry: dict[str, Any] = {"iter": it, "tip_dx_mm": tip.dx_mm, "tip_dz_mm": tip.dz_mm}
        if step is None:
            ctx.trace.decision("pick_servo", {**entry, "action": why})
            break
        total, aim = _stepped_aim(st, step)
        res = fk_lookup(
            table, "pick", aim, *band, dist_max=s.pick_place.dist_max_m,
            **_step_bound(s, pose),
        )  # fmt: skip
        ctx.trace.decision("lookup", {"pick_servo": it, **res.to_dict()})
        entry.update(step_mm=list(step), total_mm=list(total), aim_xz=list(aim))
        stop: str | None = None
        target: tuple[float, ...] | None = None
        how = "lookup"
        if (
            res.ok
            and res.angles is not None
            and (res.distance or 0.0) <= s.pick_place.pick_resid_max_m
        ):
            target = tuple(res.angles)
        else:
            # no table row that near under the bound (at the edge of reach, none within
            # dist_max at all): solve the small step from this pose with the FK model
            target, how, stop = _fine_step(s, pose, aim, band)
            if res.ok:
                entry["lookup_lands_mm"] = 1000.0 * (res.distance or 0.0)
            else:
                entry["lookup"] = f"out_of_range: {res.reason}"
                if stop is not None:
                    stop = f"lookup out_of_range: {res.reason}; {stop}"
        if target is not None and stop is None:
            entry["how"] = how
            verdict = check_pose(
                target,
                j1_max=s.arm.j1_max,
                lookup_ok=how == "lookup" or None,
                envelope=ctx.envelope,
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
            target, s.motion.tol_pick_place, f"pick servo {it}", lookup_ok=how == "lookup" or None,
            near_work=True,
        )  # fmt: skip
        pose = target
        height = float(fk_tip(pose)[1])
        st.pick_path.append(pose)
        st.pick_pose, st.pick_ee_y, st.aim_xz, st.pick_servo_mm = pose, height, aim, total
        iters = it
        await ctx.at_rest(f"pick servo {it}")
        st.tip = await ctx.eyes.measure_tip(
            (bx, bz), height + s.pick_place.pick_tip_height_mm / 1000.0, f"{tag}_servo{it}"
        )
    else:
        if st.tip is not None:  # the last step's measurement decides "converged"
            _step, why = _pick_servo_step(s, st.tip, st.correction_used_mm, st.pick_servo_mm)
            if _step is not None:
                why = (
                    f"pick_servo_max_iter {s.pick_place.pick_servo_max_iter} steps made, still off"
                )
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
        await ctx.move(
            judged_at, s.motion.tol_lift_to_arc, "lift: to the approach arc", lookup_ok=True
        )
    st.pick_attempts += 1
    st.lifted_at = tuple(judged_at)
    lift_ee_y = float(fk_tip(judged_at)[1])
    await ctx.at_rest("pick judgement")
    v = await ctx.eyes.judge_pick(lift_ee_y, f"lift_judge_attempt{st.pick_attempts}")
    st.pick_verdict = v
    if v.verdict == "yes":
        _learn_correction(ctx)
        at = fk_tip(judged_at)
        st.lifted_block_xz = await ctx.eyes.locate_block(
            0.0, (float(at[0]), float(at[2])), f"lift_mat_attempt{st.pick_attempts}"
        )
        return Outcome.OK
    _learn_correction(ctx)  # a miss with a measured tip still shows the offset
    tip = st.tip
    if tip is not None and tip.ok:
        st.height_miss = tip.dist_mm <= s.pick_place.pick_servo_tol_mm
        ctx.trace.decision(
            "height_miss",
            {"tip_mm": tip.dist_mm, "height_miss": st.height_miss, "band": list(_pick_band(ctx))},
        )
    if st.pick_attempts < s.pick_place.max_pick_attempts:
        ctx.trace.decision(
            "pick_retry", {"attempt": st.pick_attempts, "of": s.pick_place.max_pick_attempts}
        )
        return Outcome.RETRY
    raise StageFailed(f"{ctx.stage}: pick judged no after {st.pick_attempts} attempts: {v.reason}")


def _learn_correction(ctx: TrialContext) -> None:
    """Learn the offset from the attempt's last tip measurement, after a pick judged yes or
    missed (docs/runtime.md, "Memories"). The
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
    new = ctx.corrections.update(
        st.correction_key, *used, tip.dx_mm, tip.dz_mm, s.pick_place.ema_alpha
    )
    ctx.trace.decision(
        "correction_update",
        {"key": new.key, "updated": True, "dx_mm": new.dx_mm, "dz_mm": new.dz_mm, "n": new.n},
    )


async def up_from_mat(ctx: TrialContext, note: str) -> None:
    """From the pick pose up to the pick approach pose: one move, or after pick servo steps
    back the way the arm came down, each move within the joint bound (docs/safety.md).

    Holding the block it is a carrying move (``ctx.approach_tol``)."""
    st = ctx.state
    assert st.pick_approach is not None
    tol = ctx.approach_tol
    if len(st.pick_path) > 1:
        await ctx.retrace(
            [*reversed(st.pick_path[:-1]), st.pick_approach], tol, note, into_box=False
        )
        return
    await ctx.move(st.pick_approach, tol, note, lookup_ok=True, near_work=True)


async def lower_to_mat(ctx: TrialContext, why: str, *, at_approach: bool = False) -> None:
    """Back down to the pick pose the way the descent went: over the block first when the
    pick came from the hover (the judge looked from the arc's pose; ``at_approach``: the
    arm is at the hover already), then straight down."""
    s, st = ctx.settings, ctx.state
    assert st.pick_pose is not None and st.pick_approach is not None
    if st.pick_hover and not at_approach:
        await ctx.move(st.pick_approach, ctx.approach_tol, f"{why}: over the block", lookup_ok=True)
    if len(st.pick_path) > 1:  # the servo moved: down the way it went
        await ctx.retrace(
            st.pick_path, s.motion.tol_pick_place, f"{why}: lower to the mat", into_box=False
        )
        return
    await ctx.move(
        st.pick_pose,
        s.motion.tol_pick_place,
        f"{why}: lower to the mat",
        lookup_ok=True,
        near_work=True,
    )


async def retry_pick(ctx: TrialContext) -> Outcome:
    """A missed pick: open where a partly held block cannot fall far, then HOME, so detect sees
    the mat unobstructed as on the first attempt.

    It lowers to the pick pose (the block, if held, is back on the mat where it was
    grasped), opens, goes up again (docs/stages.md, "retry_pick"); with nothing to lower to
    (a pick found never lifted, the arm beside the box) it opens where the arm is.
    """
    s, st = ctx.settings, ctx.state
    if st.block_lost:
        # the pick was found never to have lifted the block (release.py, _retry_never_lifted):
        # the jaws are empty and the arm is beside the box; back over it as return_home goes,
        # open there, HOME, and forget the place attempt
        assert st.place_approach is not None
        await ctx.move(
            st.place_approach, s.motion.tol_pick_place, "retry: back over the box", lookup_ok=True
        )
        _forget_the_place(st)
        at_mat = False
    else:  # never lowered: nothing to lower to (cannot happen after a grasp)
        at_mat = st.pick_pose is not None and st.pick_approach is not None
    if at_mat:
        ctx.trace.decision("retry_release", {"open_at": "mat"})
        await lower_to_mat(ctx, "retry")
    await ctx.gripper("open", "release after failed pick" + (" (mat)" if at_mat else ""))
    st.holding = False
    if at_mat:
        await up_from_mat(ctx, "retry: up from the mat")
    await ctx.move(s.arm.home, s.motion.tol_home, "home before re-detect")
    return Outcome.OK


def _forget_the_place(st: TrialState) -> None:
    """A new pick attempt after a place attempt whose block was never lifted: the place
    phase starts afresh (its approach, poses, views and verdict belong to that attempt)."""
    fresh = TrialState()
    for name in ("place_key", "place_dee_start_mm", "place_approach", "place_pose",
                 "place_ee_y", "place_path", "side_frame", "release_view", "release_confirmed",
                 "hovering", "release_refused", "block_lost", "lost_at_release", "held_evidence",
                 "place_verdict",
                 "lifted_block_xz"):  # fmt: skip
        setattr(st, name, getattr(fresh, name))


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
            hover_band=s.pick_place.pick_hover_band,
            dist_max=s.pick_place.dist_max_m,
            hover_dist_max=s.pick_place.pick_hover_dist_m,
            resid_max=s.pick_place.pick_resid_max_m,
            step_max=s.arm.joint_step_max_deg,
            reachable=reachable,
        )

    def reachable(hover: Sequence[float]) -> bool:
        # the path check the move to the hover will pass (from the approach pose, read)
        return ctx.motion_checks(hover, near_work=False, into_box=False)[1] is None

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
        await ctx.move(plan.hover.angles, s.motion.tol_approach, "pick hover", lookup_ok=True)
        st.pick_approach = tuple(plan.hover.angles)  # the lift comes back here
        st.pick_hover = True
    return plan.pick


def _pick_band(ctx: TrialContext) -> tuple[float, float]:
    """The pick lookup's ee_y band: ``pick_band``, or after a miss in height (the tip was on
    the block in x-z) ``pick_retry_band``, the middle of it, farthest from both ends of the
    gripper's reach in height (docs/stages.md, "The pick servo"); both moved by the
    calibrated ``pick_tip_height_mm``."""
    s = ctx.settings
    lo, hi = s.pick_place.pick_retry_band if ctx.state.height_miss else s.pick_place.pick_band
    # a calibrated tip height error: choose rows whose true tip height is in the band
    h = s.pick_place.pick_tip_height_mm / 1000.0
    return (lo - h, hi - h) if h else (lo, hi)


def _step_bound(s: RuntimeSettings, ref: Sequence[float] | None) -> dict[str, Any]:
    """The lookup's joint-continuity arguments (docs/safety.md): none when the bound is off."""
    if s.arm.joint_step_max_deg <= 0 or ref is None:
        return {}
    return {"step_ref": tuple(ref), "step_max": s.arm.joint_step_max_deg}
