"""The release, never blind, its re-aims, the place judgement and the way HOME
(docs/release.md, docs/stages.md)."""

from __future__ import annotations

import math
from typing import Any

from mecharm.common.kinematics import fk_tip
from mecharm.common.logging import get_logger
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.engine import Outcome, StageFailed
from mecharm.runtime.perception.judge import BOX_MOVED_MM
from mecharm.runtime.pick_place.context import BlockLost, TrialContext, TrialState
from mecharm.runtime.pick_place.place import (
    PICK_RECHECK,
    _HeldBlockWatch,
    _learn_failed_place,
    _lost,
    _place_band,
    _place_lookup,
    _servo_to,
    _side_frame,
)
from mecharm.runtime.ports import (
    ReleaseView,
)

log = get_logger("mecharm.runtime.pick_place.release")

#: the settings this module reads (docs/settings.md, "What each stage reads"; a test
#: checks it against the code)
SETTINGS_READ: frozenset[str] = frozenset({
    "arm.gripper_settle_s", "pick_place.height_max_mm", "pick_place.height_raise_margin_mm", "pick_place.height_step_mm",
    "arm.home", "pick_place.max_pick_attempts", "pick_place.release_check", "pick_place.release_margin_mm", "pick_place.release_reaim_max",
    "pick_place.release_side_check", "pick_place.swept_j0", "motion.tol_home", "motion.tol_pick_place"
})  # fmt: skip


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
    if s.pick_place.release_check:
        try:
            await _check_release(ctx)
        except BlockLost as exc:  # lost while re-aiming: nothing left to release
            return await _lost(ctx, exc)
    await ctx.sleep(s.arm.gripper_settle_s)  # pre-release settle
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
    elif v.margin_mm < s.pick_place.release_margin_mm:
        top, top_ok = (
            f"seen {v.dist_mm or 0.0:.1f} mm from the box centre, {v.margin_mm:.1f} mm inside "
            f"the opening (needs {s.pick_place.release_margin_mm:g} mm)",
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
    if not s.pick_place.release_side_check:
        side += ", advisory"
    ok = top_ok and (v.side != "not_seen" or not s.pick_place.release_side_check)
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
    for attempt in range(s.pick_place.release_reaim_max + 1):
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
        if _block_unseen(view):
            await _gone_from_the_jaws(ctx, what)
        if attempt == s.pick_place.release_reaim_max or not _can_reaim(view):
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
        s.motion.tol_pick_place,
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
        st.place_path or [st.place_pose], s.motion.tol_pick_place, "release anyway: back down"
    )
    st.hovering = False


def _block_unseen(v: ReleaseView) -> bool:
    """The top camera did not see the held block near the box in most of its frames."""
    return v.top_frames > 0 and 2 * v.top_seen <= v.top_frames


async def _gone_from_the_jaws(ctx: TrialContext, what: str) -> None:
    """The release view found no block near the box: look at the jaws, where the model puts
    the tip. Not seen there either: the block may have left the jaws before the release (on
    harsh it slipped out over the box and lay in it, 3 of 60 trials, which were refused and
    "put back" with empty jaws), so the place is judged where it went (``BlockLost``); a
    block the judge does not find in the box is then treated as still held, as the refusal
    did (retreat_and_judge). Seen: the release is refused as before (docs/release.md, "A
    block that left the jaws")."""
    if await look_at_jaws(ctx) != "not_seen":
        return
    st = ctx.state
    st.holding, st.block_lost, st.lost_at_release = False, True, True
    raise BlockLost(
        f"{ctx.stage}: the block is not in the jaws: {what}; not seen at the tip either",
        block_xz=None,
    )


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
        [*reversed(st.place_path[:-1]), st.place_approach],
        s.motion.tol_pick_place,
        f"re-aim {n}: up",
    )
    lo, hi, _dee = _place_band(ctx)
    res = _place_lookup(ctx, aim, st.place_approach, lo, hi)
    ctx.trace.decision("lookup", {"reaim": n, **res.to_dict()})
    if not res.ok or res.angles is None:
        ctx.trace.decision("release_reaim_stop", {"attempt": n, "reason": res.reason})
        # back down the way it came up, so the refusal's hover below starts from the place
        await ctx.retrace(st.place_path, s.motion.tol_pick_place, f"re-aim {n}: back down")
        return False
    await ctx.move(
        res.angles,
        s.motion.tol_pick_place,
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


async def retreat_and_judge(ctx: TrialContext) -> Outcome:
    s, st = ctx.settings, ctx.state
    assert st.place_approach is not None
    if not st.hovering:  # else already up at the place approach pose (a lost block, found so there)
        await ctx.retrace(
            [*reversed(st.place_path[:-1]), st.place_approach],
            s.motion.tol_pick_place,
            "retreat up",
        )
    st.hovering = False
    swept = (s.pick_place.swept_j0, *st.place_approach[1:])
    await ctx.move(swept, s.motion.tol_pick_place, "swept retreat")
    await ctx.at_rest("place judgement")
    v = await ctx.eyes.judge_place(st.side_frame, "retreat_judge")
    st.place_verdict = v
    placed = v.verdict == "yes"
    if st.block_lost:  # the height memory learnt from the loss already (_learn_failed_place)
        if not placed and not _never_lifted(st):
            jaws = await look_at_jaws(ctx)
            # not seen twice but not in the box either: a block the release check could not
            # find may still hang in the jaws out of sight, never carried HOME on a guess
            if jaws == "seen" or st.lost_at_release:
                await _still_held(ctx, seen=jaws == "seen")
        return _retry_never_lifted(ctx)
    # measured at the release (the release check's top view), only when it was confirmed
    view = st.release_view if st.release_confirmed else None
    up = ctx.heights.learn(
        st.place_key,
        placed,
        None if view is None else view.margin_mm,
        step_mm=s.pick_place.height_step_mm,
        max_mm=s.pick_place.height_max_mm,
        raise_margin_mm=s.pick_place.height_raise_margin_mm,
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


def _never_lifted(st: TrialState) -> bool:
    """The pick was revised to "no": the block lies on the mat, the jaws are empty."""
    v = st.pick_verdict
    return v is not None and v.judge == PICK_RECHECK and v.verdict == "no"


async def _still_held(ctx: TrialContext, *, seen: bool = True) -> None:
    """The block judged lost and not found in the box is seen in the jaws at the swept
    retreat (``seen``): it was held all along (pressed against the box, it lagged the tip);
    or, lost at the release check, it is seen nowhere (it may hang out of sight). The trial
    ends as a refused release does — the block goes back on the mat (``release_refused:
    put_back``) or is held in the hover — instead of carrying it HOME, where the next
    trial's first open would drop it (docs/release.md, "Say what was seen, not what was
    believed")."""
    s, st = ctx.settings, ctx.state
    assert st.place_approach is not None
    st.block_lost, st.holding = False, True
    why = (
        "the block judged lost is still in the gripper (seen at the tip after the place judge)"
        if seen
        else "the block is not in the box and not seen at the tip: it may still be in the "
        "gripper, out of sight"
    )
    st.release_refused = why
    ctx.trace.decision("lost_block_held", {"why": why})
    log.warning("lost_block_held", why=why)
    # from the swept retreat back over the box: the hover the exit path holds in or puts the
    # block back from (the arm left the box already: nothing to retrace)
    await ctx.move(st.place_approach, s.motion.tol_pick_place, "held after all: back over the box",
                   lookup_ok=True)  # fmt: skip
    st.hovering = True
    raise StageFailed(f"{ctx.stage}: {why}")


def _retry_never_lifted(ctx: TrialContext) -> Outcome:
    """RETRY when the pick was revised to "no" (the block never left the mat, docs/release.md)
    and attempts are left: retry_pick takes the arm back over the box, opens the empty jaws
    and goes HOME, and detect finds the block where it lies."""
    s, st = ctx.settings, ctx.state
    if not _never_lifted(st):
        return Outcome.OK
    last = st.pick_attempts >= s.pick_place.max_pick_attempts
    ctx.trace.decision(
        "pick_retry",
        {"attempt": st.pick_attempts, "of": s.pick_place.max_pick_attempts,
         "why": "never lifted; no attempt left" if last else "never lifted"},
    )  # fmt: skip
    return Outcome.OK if last else Outcome.RETRY


async def return_home(ctx: TrialContext) -> Outcome:
    s, st = ctx.settings, ctx.state
    assert st.place_approach is not None
    await ctx.move(
        st.place_approach, s.motion.tol_pick_place, "back to approach_place", lookup_ok=True
    )
    await ctx.move(s.arm.home, s.motion.tol_home, "home")
    await ctx.arm.set_fresh_mode(0)
    st.fresh_mode_on = False
    ctx.trace.decision("fresh_mode", 0)
    return Outcome.OK
