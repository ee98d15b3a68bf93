"""Rollouts, the third task: a policy drives the arm, the rig judges where the block ended.

A learned policy (a LeRobot checkpoint), a recorded episode played back, or a policy of the
caller's runs at a fixed rate through the control loop and the safe arm (body.py); the
trial around it is every task's: the recorder, the top camera's video, the trace, the
judges, the ledger (docs/rollouts.md). Its first stages are pick-and-place's (HOME with the
gripper open, detect), so the place judge and the path check know the scene.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from mecharm.runtime.engine import Outcome, Task, TrialSetup
from mecharm.runtime.pick_place import make_context
from mecharm.runtime.pick_place.pick import detect, open_gripper_home
from mecharm.runtime.rollout.body import (
    RolloutContext,
    exit_rollout,
    held,
    judge_rollout,
    retreat,
    rollout,
)
from mecharm.runtime.rollout.records import RECORDS
from mecharm.runtime.rollout.stages import NOMINAL_S, TRANSITIONS, Stage

__all__ = ["RECORDS", "TASK", "RolloutContext", "Stage"]

#: the settings this module reads (docs/settings.md, "What each stage reads"; a test
#: checks it against the code)
SETTINGS_READ: frozenset[str] = frozenset({"rollout.policy"})

BODIES: dict[Stage, Callable[[RolloutContext], Awaitable[Outcome]]] = {
    Stage.OPEN_GRIPPER_HOME: open_gripper_home, Stage.DETECT: detect, Stage.ROLLOUT: rollout,
    Stage.RETREAT: retreat, Stage.JUDGE_ROLLOUT: judge_rollout,
}  # fmt: skip


def _context(setup: TrialSetup) -> RolloutContext:
    ctx = make_context(setup, RolloutContext)
    ctx.camera = getattr(setup.rig, "camera", None)
    # the policy in the records from the start: a trial stopped before the rollout names it too
    setup.trace.decision("rollout_policy", {"policy": ctx.settings.rollout.policy})
    return ctx


TASK: Task[Stage, RolloutContext] = Task(
    name="rollout",
    first=Stage.OPEN_GRIPPER_HOME,
    done=Stage.DONE,
    abort=Stage.ABORT,
    transitions=TRANSITIONS,
    bodies=BODIES,
    exit=exit_rollout,
    context=_context,
    records=RECORDS,
    nominal_s=NOMINAL_S,
    held=held,
    # a rollout teaches the pick-and-place memories nothing
)
