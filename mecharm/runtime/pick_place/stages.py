"""The pick-and-place task's stages, their wire names and its transition table.

The stages are described in docs/stages.md; their names say what they do and are the
wire values written to traces, states.csv and run logs (``FORMER_NAMES`` maps the first
format's ``stage1``..``stage10`` names, for old traces). Why a table: every way a trial
can go is readable here in one place (and drawn in docs/stages.md).
"""

from __future__ import annotations

from enum import StrEnum

from mecharm.runtime.engine import Outcome


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


#: The whole task. Anything not listed (every FAIL) goes to ABORT (the exit path, trial.py).
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
    # the pick was found never to have lifted the block (the pick judgement revised)
    (Stage.RETREAT_AND_JUDGE, Outcome.RETRY): Stage.RETRY_PICK,
    (Stage.RETURN_HOME, Outcome.OK): Stage.DONE,
}


#: real-rig seconds a stage takes: the medians of the simulated rig's demo runs (5x time
#: scale, scaled back to 1x), rounded (the console's expected durations, docs/console.md)
NOMINAL_S: dict[str, float] = {
    "open_gripper_home": 2.5, "detect": 8.0, "correct_aim": 0.0, "approach_pick": 5.0,
    "descend_pick": 6.0, "grasp": 2.0, "lift_and_judge": 6.0, "approach_place": 5.0,
    "descend_place": 1.0, "servo_place": 3.0, "release": 6.0, "retreat_and_judge": 5.0,
    "return_home": 7.0,
}  # fmt: skip


STAGE_ORDER: tuple[Stage, ...] = tuple(s for s in Stage if s not in (Stage.DONE, Stage.ABORT))
