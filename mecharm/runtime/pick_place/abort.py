"""Pick-and-place's way out of a stopped trial (``TASK.exit``): the arm to a safe pose, and
the block put down, put back, or held in the hover and told (docs/stages.md, "abort";
docs/release.md, "Say what was seen").

The trial (trial.py) runs it after any stop, whatever the stage; it decides from the
task's state where the arm is and what it holds.
"""

from __future__ import annotations

from typing import Any

from mecharm.common.logging import get_logger
from mecharm.runtime.engine import Attempt, exit_attempts
from mecharm.runtime.pick_place.context import TrialContext
from mecharm.runtime.pick_place.pick import lower_to_mat, up_from_mat
from mecharm.runtime.pick_place.release import look_at_jaws
from mecharm.runtime.pick_place.stages import Stage

__all__ = ["exit_path", "put_back"]

log = get_logger("mecharm.runtime.pick_place.abort")

#: the settings this module reads (docs/settings.md, "What each stage reads"; a test
#: checks it against the code)
SETTINGS_READ: frozenset[str] = frozenset({
    "arm.home", "pick_place.release_check", "pick_place.release_refused", "motion.tol_home", "motion.tol_pick_place"
})  # fmt: skip


async def exit_path(ctx: TrialContext, arm_alive: bool, reason: str) -> str:
    """The one way out of a stopped trial: a safe pose when possible, fresh mode off, the
    block never opened at a random place nor carried HOME. Returns the trial's reason, with
    what became of a block the exit path put back (docs/stages.md, "abort").

    ``arm_alive``: False when the daemon connection is lost (no arm action is tried)."""
    steps: list[dict[str, Any]] = []
    ctx.stage = Stage.ABORT
    ctx.trace.stage = Stage.ABORT.value
    ctx.recorder.stage(Stage.ABORT.value)
    s, st = ctx.settings, ctx.state
    if not arm_alive:
        steps.append({"step": "arm actions skipped", "why": "daemon connection lost"})
        if st.holding and s.pick_place.release_check:
            await tell_block_held(ctx, forced=False)
        ctx.trace.decision("exit", steps[-1])
        return reason
    forced = reason.startswith("forced stop")
    attempt = exit_attempts(steps)

    holding = st.holding and s.pick_place.release_check
    # the pick was judged no for the last time: the jaws are closed on nothing or on a
    # partly held block; put it down where retry_pick would, then HOME as usual
    to_put_down = (
        holding
        and st.place_approach is None
        and st.pick_verdict is not None
        and st.pick_verdict.verdict == "no"
        and st.pick_pose is not None
        and st.pick_approach is not None
    )
    # a refused release, unattended: the block goes back where it was picked (docs/release.md)
    to_put_back = (
        holding
        and bool(st.release_refused)
        and s.pick_place.release_refused == "put_back"
        and st.lifted_at is not None
        and st.pick_pose is not None
        and st.pick_approach is not None
    )
    if forced:
        await attempt("stop", ctx.arm.stop)
    elif to_put_down:
        await put_down(ctx, attempt)
    elif to_put_back:
        await hold_in_hover(ctx, attempt, steps)
        if st.hovering:
            await put_back(ctx, attempt)
    elif holding:
        await hold_in_hover(ctx, attempt, steps)
    else:
        # up first (never drag a low pose sideways), then HOME
        up = st.place_approach if st.place_pose is not None else st.pick_approach
        if st.place_pose is None and ctx.last_commanded in st.pick_path[1:]:
            # low at the pick after pick servo steps: up the way it came down (docs/stages.md)
            ok = await attempt("retreat to approach", lambda: up_from_mat(ctx, "abort: retreat"))
        elif st.place_pose is None and st.pick_path and ctx.last_commanded is None:
            # a servo step did not arrive: the arm is somewhere past the last pose it reached,
            # known only from the readings; up the way it came, each move bounded from there
            ok = await attempt("retreat to approach", lambda: retrace_up(ctx, "abort: retreat"))
        elif up is not None and (st.pick_pose is not None or st.place_pose is not None):
            ok = await attempt(
                "retreat to approach",
                lambda: ctx.move(up, s.motion.tol_pick_place, "abort: retreat"),
            )
        else:
            ok = True
        if ok:
            await attempt("home", lambda: ctx.move(s.arm.home, s.motion.tol_home, "abort: home"))
    if (st.fresh_mode_on or forced) and await attempt(
        "fresh mode off", lambda: ctx.arm.set_fresh_mode(0)
    ):
        st.fresh_mode_on = False
    if holding and st.holding:
        await tell_block_held(ctx, forced, attempt)
    ctx.trace.decision("exit", {"forced": forced, "steps": steps})
    if not st.put_back:
        return reason
    if st.held_evidence == "not_seen":  # say what was done, not what was believed
        return reason + "; the gripper was opened on the mat where the block was picked"
    return reason + "; the block was put back on the mat"


async def put_back(ctx: TrialContext, attempt: Attempt) -> None:
    """From the hover over the box back to where the block was picked, the way it came (the
    place approach → the pose the lift ended at → down the pick path), open there, up, HOME.
    Every move is one the arm already made holding this block, each through the guards; a
    failed step leaves the arm where it got to, still holding (told below)."""
    s, st = ctx.settings, ctx.state
    assert st.lifted_at is not None
    lifted = st.lifted_at
    ctx.trace.decision("put_back", {"to": "pick pose", "why": st.release_refused})
    if not await attempt(
        "back over the mat",
        lambda: ctx.move(lifted, ctx.approach_tol, "put back: over the mat", lookup_ok=True),
    ):
        return
    st.hovering = False
    if not await attempt("lower to the mat", lambda: lower_to_mat(ctx, "put back")):
        return
    if not await attempt("open", lambda: ctx.gripper("open", "put back on the mat")):
        return
    st.holding = False
    st.put_back = True
    log.warning("block_put_back", why=st.release_refused)
    if ctx.on_stage is not None:
        ctx.on_stage(Stage.ABORT.value, "block put back on the mat", "")
    if not await attempt("up from the mat", lambda: up_from_mat(ctx, "put back: up")):
        return
    await attempt("home", lambda: ctx.move(s.arm.home, s.motion.tol_home, "put back: home"))


async def retrace_up(ctx: TrialContext, note: str) -> None:
    """From where a pick move that did not arrive left the arm (``last_measured``) up to the
    pick approach, back through every pose of the pick path (the last one reached included),
    each move near the work: within ``joint_step_max_deg`` and path-checked (docs/safety.md)."""
    s, st = ctx.settings, ctx.state
    assert st.pick_approach is not None
    await ctx.retrace(
        [*reversed(st.pick_path), st.pick_approach], s.motion.tol_pick_place, note, into_box=False
    )


async def put_down(ctx: TrialContext, attempt: Attempt) -> None:
    """After the last failed pick: open at the mat, as retry_pick does."""
    s, st = ctx.settings, ctx.state
    assert st.pick_pose is not None and st.pick_approach is not None
    there = await attempt("lower to the mat", lambda: lower_to_mat(ctx, "abort"))
    if not there or not await attempt("open", lambda: ctx.gripper("open", "abort: put down (mat)")):
        return  # still holding: told below, the arm stays where it got to
    st.holding = False
    if not await attempt("up from the mat", lambda: up_from_mat(ctx, "abort: up")):
        return
    await attempt("home", lambda: ctx.move(s.arm.home, s.motion.tol_home, "abort: home"))


async def hold_in_hover(
    ctx: TrialContext,
    attempt: Attempt,
    steps: list[dict[str, Any]],
) -> None:
    """The block is (or may be) in the gripper: never open it at a random place, never carry
    it HOME. Up to the hover above where the arm works (the place approach pose once the
    arm went there, else the pick approach) and stay there (docs/stages.md, "abort")."""
    s, st = ctx.settings, ctx.state
    hover = st.place_approach if st.place_approach is not None else st.pick_approach
    in_box = st.place_approach is not None and bool(st.place_path)

    async def up() -> None:
        assert hover is not None
        if in_box:  # back up the way the arm went in, each move within the continuity bound
            await ctx.retrace(
                [*reversed(st.place_path[:-1]), hover], s.motion.tol_pick_place, "abort: hover"
            )
        else:
            await ctx.move(hover, s.motion.tol_pick_place, "abort: hover")

    if st.hovering:
        steps.append({"step": "hover", "ok": True, "why": "already in the hover"})
    elif hover is not None and await attempt("hover holding the block", up):
        st.hovering = True
    steps.append({"step": "gripper stays closed", "why": "block held; not taken HOME"})


async def tell_block_held(
    ctx: TrialContext,
    forced: bool,
    attempt: Attempt | None = None,
) -> None:
    """Say it on the console and in the log, from what the top camera sees at the tip, not
    only from the runtime's belief (docs/release.md, "Say what was seen"): the block seen in
    the jaws, not seen there (it may have slipped out), or unknown (no look was possible)."""
    st = ctx.state
    where = "in the hover" if st.hovering else ("stopped" if forced else "where it stopped")
    seen = "unknown"
    if st.held_evidence and st.hovering:  # looked in this hover already (the release check)
        seen = st.held_evidence
    elif attempt is not None and not forced:
        box: list[str] = []

        async def look() -> None:
            box.append(await look_at_jaws(ctx))

        if await attempt("look at the jaws", look):
            seen = box[0]
    st.held_evidence = seen
    if seen == "not_seen":
        msg = (
            f"BLOCK NOT SEEN IN THE GRIPPER: the arm stays {where} with the gripper closed; the "
            "runtime last knew it held the block, but the top camera does not see it at the tip "
            "(it may have slipped into the box or onto the mat); look before the next trial "
            "(the next trial opens the gripper at HOME)"
        )
    else:
        what = "seen at the tip by the top camera" if seen == "seen" else "not looked at"
        msg = (
            f"BLOCK STILL IN THE GRIPPER ({what}): the arm stays {where} with the gripper "
            "closed; take the block out by hand before the next trial (the next trial opens "
            "the gripper at HOME)"
        )
    log.error("block_held_at_stop", where=where, forced=forced, evidence=seen)
    if ctx.on_stage is not None:
        ctx.on_stage(Stage.ABORT.value, "holding", msg)
