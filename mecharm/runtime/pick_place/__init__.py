"""Pick-and-place, the first task: the red block from the mat into the white box.

Its stages (stages.py), what they share (context.py) and their bodies by phase — pick
(pick.py), place (place.py), release (release.py) — and its way out after a stop
(abort.py) make ``TASK``, which the stage driver (engine.py) and the trial (trial.py)
run (docs/stages.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from mecharm.runtime.engine import Outcome, Task, TrialSetup
from mecharm.runtime.memories import CorrectionMemory, HeightMemory
from mecharm.runtime.pick_place.abort import exit_path
from mecharm.runtime.pick_place.context import BlockLost, TrialContext, TrialState
from mecharm.runtime.pick_place.pick import (
    approach_pick,
    correct_aim,
    descend_pick,
    detect,
    grasp,
    lift_and_judge,
    lower_to_mat,
    open_gripper_home,
    retry_pick,
    up_from_mat,
)
from mecharm.runtime.pick_place.place import approach_place, descend_place, servo_place
from mecharm.runtime.pick_place.records import RECORDS
from mecharm.runtime.pick_place.release import look_at_jaws, retreat_and_judge, return_home
from mecharm.runtime.pick_place.release import release as _release  # not the module's name
from mecharm.runtime.pick_place.stages import (
    FORMER_NAMES,
    NOMINAL_S,
    STAGE_ORDER,
    TRANSITIONS,
    Stage,
)

__all__ = [
    "BODIES",
    "FORMER_NAMES",
    "RECORDS",
    "STAGE_ORDER",
    "TASK",
    "TRANSITIONS",
    "BlockLost",
    "Stage",
    "TrialContext",
    "TrialState",
    "look_at_jaws",
    "lower_to_mat",
    "make_context",
    "up_from_mat",
]

BODIES: dict[Stage, Callable[[TrialContext], Awaitable[Outcome]]] = {
    Stage.OPEN_GRIPPER_HOME: open_gripper_home, Stage.DETECT: detect, Stage.CORRECT_AIM: correct_aim,
    Stage.APPROACH_PICK: approach_pick, Stage.DESCEND_PICK: descend_pick, Stage.GRASP: grasp,
    Stage.LIFT_AND_JUDGE: lift_and_judge, Stage.RETRY_PICK: retry_pick, Stage.APPROACH_PLACE: approach_place,
    Stage.DESCEND_PLACE: descend_place, Stage.SERVO_PLACE: servo_place, Stage.RELEASE: _release,
    Stage.RETREAT_AND_JUDGE: retreat_and_judge, Stage.RETURN_HOME: return_home,
}  # fmt: skip


def _may_stop(ctx: TrialContext) -> bool:
    """A storage fault never stops the trial with the block in the gripper: the place goes
    on to the release (docs/reliability.md)."""
    return not ctx.state.holding


C = TypeVar("C", bound=TrialContext)


def make_context(setup: TrialSetup, cls: type[C]) -> C:
    """One trial's context of class ``cls`` (TrialContext or a task's extension of it): the
    session's FK table and arcs, the root's memories (traced as a header input, as replay
    needs them)."""
    rig, layout = setup.rig, setup.layout
    ctx = cls(
        settings=rig.settings,
        arm=setup.arm,
        eyes=setup.eyes,
        recorder=rig.recorder,
        clock=rig.clock,
        trace=setup.trace,
        table=rig.table,
        arc_pick=rig.arc_pick,
        arc_place=rig.arc_place,
        corrections=CorrectionMemory(layout.correction_memory, root=layout.root),
        heights=HeightMemory(layout.height_memory, root=layout.root),
        run_dir=setup.run_dir,
        on_stage=setup.on_stage,
        on_stage_start=setup.on_stage_start,
        storage_fault=setup.trace.check_storage,
        envelope=setup.envelope,
    )
    setup.trace.input(
        "memories", {"correction": ctx.corrections.entries, "height": ctx.heights.entries}
    )
    return ctx


def _context(setup: TrialSetup) -> TrialContext:
    return make_context(setup, TrialContext)


def _held(ctx: TrialContext) -> str | None:
    """After a stop: the block still in the jaws (the arm holds it in the hover), with what
    the top camera saw at the tip; None when the gripper is empty."""
    return ctx.state.held_evidence if ctx.state.holding else None


def _learn(ctx: TrialContext) -> None:
    """The correction and height memories, as the trial left them (docs/lookup.md)."""
    ctx.corrections.save()
    ctx.heights.save()


TASK: Task[Stage, TrialContext] = Task(
    name="pick_place",
    first=Stage.OPEN_GRIPPER_HOME,
    done=Stage.DONE,
    abort=Stage.ABORT,
    transitions=TRANSITIONS,
    bodies=BODIES,
    exit=exit_path,
    context=_context,
    records=RECORDS,
    nominal_s=NOMINAL_S,
    may_stop=_may_stop,
    held=_held,
    learn=_learn,
)
