"""Lift and return's own stage bodies: the block back down, and the judgement of the return.

Every motion goes through the safe arm, by the moves pick-and-place's pick made already
(down the pick path, up it again), so the task reaches no pose the pick did not.
"""

from __future__ import annotations

import math
from typing import Any

from mecharm.common.logging import get_logger
from mecharm.runtime.engine import Outcome
from mecharm.runtime.pick_place import TrialContext, lower_to_mat, up_from_mat

__all__ = ["RETURN_TOL_MM", "judge_return", "put_back_down"]

log = get_logger("mecharm.runtime.lift_return")

#: the settings this module reads (docs/settings.md, "What each stage reads"; a test
#: checks it against the code)
SETTINGS_READ: frozenset[str] = frozenset({"arm.home", "motion.tol_home"})

#: the block is back when the top camera sees it within this of where detect saw it: the
#: detection's own scatter is a few mm, a grasp that slid moves it 10-20 mm
RETURN_TOL_MM = 25.0


async def put_back_down(ctx: TrialContext) -> Outcome:
    """Lower the lifted block to where it was picked, open, and go up again."""
    await lower_to_mat(ctx, "return")  # the lift left the arm where the pick was judged
    await ctx.gripper("open", "return: on the mat")
    ctx.state.holding = False
    await up_from_mat(ctx, "return: up from the mat")
    return Outcome.OK


async def judge_return(ctx: TrialContext) -> Outcome:
    """HOME (the top camera sees the mat unobstructed), fresh mode off, then judge: the block
    seen within RETURN_TOL_MM of where detect saw it. A verdict, not a failure: a block
    moved further is a completed trial judged no."""
    s, st = ctx.settings, ctx.state
    assert st.scene is not None and st.scene.block_xz is not None
    await ctx.move(s.arm.home, s.motion.tol_home, "home")
    await ctx.arm.set_fresh_mode(0)
    st.fresh_mode_on = False
    ctx.trace.decision("fresh_mode", 0)
    await ctx.at_rest("return judgement")
    seen = await ctx.eyes.observe_scene("return_check")
    start = st.scene.block_xz
    verdict: dict[str, Any] = {"from_xz": list(start)}
    if not seen.ok or seen.block_xz is None:
        verdict.update(verdict="no", moved_mm=None, reason=seen.reason or "block not seen")
    else:
        moved = 1000.0 * math.dist(seen.block_xz, start)
        verdict.update(
            verdict="yes" if moved <= RETURN_TOL_MM else "no",
            moved_mm=round(moved, 1),
            reason=f"seen {moved:.1f} mm from where it was (limit {RETURN_TOL_MM:g} mm)",
        )
    ctx.trace.decision("return_verdict", verdict)
    log.info("return_judged", **verdict)
    return Outcome.OK
