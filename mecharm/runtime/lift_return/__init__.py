"""Lift and return, the second task: pick the red block up and put it back where it was.

A small task that shows the shape of every task (docs/tasks.md): its own stages and
table (stages.py), its own bodies where it differs from pick-and-place (body.py), its own
columns in the records (records.py). The pick — detect, aim, approach, descend, grasp,
lift and judge, retry — is pick-and-place's, run on the same context; so is the way out
after a stop (it puts a held block down on the mat, or holds it in the hover and says so).
It needs no box in the box's place to succeed, but detect still wants the box seen (the
path check keeps every move clear of it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from mecharm.runtime.engine import Outcome, Task
from mecharm.runtime.lift_return.body import judge_return, put_back_down
from mecharm.runtime.lift_return.records import RECORDS
from mecharm.runtime.lift_return.stages import TRANSITIONS, Stage
from mecharm.runtime.pick_place import TASK as PICK_PLACE
from mecharm.runtime.pick_place import TrialContext
from mecharm.runtime.pick_place.pick import (
    approach_pick,
    correct_aim,
    descend_pick,
    detect,
    grasp,
    lift_and_judge,
    open_gripper_home,
    retry_pick,
)

__all__ = ["RECORDS", "TASK", "Stage"]

BODIES: dict[Stage, Callable[[TrialContext], Awaitable[Outcome]]] = {
    Stage.OPEN_GRIPPER_HOME: open_gripper_home, Stage.DETECT: detect, Stage.CORRECT_AIM: correct_aim,
    Stage.APPROACH_PICK: approach_pick, Stage.DESCEND_PICK: descend_pick, Stage.GRASP: grasp,
    Stage.LIFT_AND_JUDGE: lift_and_judge, Stage.RETRY_PICK: retry_pick,
    Stage.PUT_BACK_DOWN: put_back_down, Stage.JUDGE_RETURN: judge_return,
}  # fmt: skip

TASK: Task[Stage, TrialContext] = Task(
    name="lift_return",
    first=Stage.OPEN_GRIPPER_HOME,
    done=Stage.DONE,
    abort=Stage.ABORT,
    transitions=TRANSITIONS,
    bodies=BODIES,
    # pick-and-place's: the same context, memories and way out after a stop
    exit=PICK_PLACE.exit,
    context=PICK_PLACE.context,
    records=RECORDS,
    # its shared stages take what pick-and-place's do; put_back_down measured 7.3 s (time
    # scale 20, seed 11203), judge_return is a move HOME (~6 s) and a look as long as detect's
    nominal_s={**PICK_PLACE.nominal_s, "put_back_down": 8.0, "judge_return": 14.0},
    may_stop=PICK_PLACE.may_stop,
    held=PICK_PLACE.held,
    learn=PICK_PLACE.learn,
)
