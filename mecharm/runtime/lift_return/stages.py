"""Lift and return's stages and transition table (docs/tasks.md, "Lift and return").

The stages it shares with pick-and-place keep their wire names, so a trace, the console
and the recorder's states.csv read the same for the same stage of either task.
"""

from __future__ import annotations

from enum import StrEnum

from mecharm.runtime.engine import Outcome


class Stage(StrEnum):
    """The stages, in trial order; the values are the names on the wire."""

    OPEN_GRIPPER_HOME = "open_gripper_home"
    DETECT = "detect"
    CORRECT_AIM = "correct_aim"
    APPROACH_PICK = "approach_pick"
    DESCEND_PICK = "descend_pick"
    GRASP = "grasp"
    LIFT_AND_JUDGE = "lift_and_judge"
    RETRY_PICK = "retry_pick"
    PUT_BACK_DOWN = "put_back_down"  # down where it was picked, open, up
    JUDGE_RETURN = "judge_return"  # HOME; the top camera: is the block back where it was?
    DONE = "done"
    ABORT = "abort"


#: Anything not listed (every FAIL) goes to ABORT, then pick-and-place's way out.
TRANSITIONS: dict[tuple[Stage, Outcome], Stage] = {
    (Stage.OPEN_GRIPPER_HOME, Outcome.OK): Stage.DETECT,
    (Stage.DETECT, Outcome.OK): Stage.CORRECT_AIM,
    (Stage.CORRECT_AIM, Outcome.OK): Stage.APPROACH_PICK,
    (Stage.APPROACH_PICK, Outcome.OK): Stage.DESCEND_PICK,
    (Stage.DESCEND_PICK, Outcome.OK): Stage.GRASP,
    (Stage.GRASP, Outcome.OK): Stage.LIFT_AND_JUDGE,
    (Stage.LIFT_AND_JUDGE, Outcome.OK): Stage.PUT_BACK_DOWN,
    (Stage.LIFT_AND_JUDGE, Outcome.RETRY): Stage.RETRY_PICK,
    (Stage.RETRY_PICK, Outcome.OK): Stage.DETECT,
    (Stage.PUT_BACK_DOWN, Outcome.OK): Stage.JUDGE_RETURN,
    (Stage.JUDGE_RETURN, Outcome.OK): Stage.DONE,
}
