"""The rollout task's stages and transition table (docs/rollouts.md).

The first two are pick-and-place's (same wire names): the arm HOME with the gripper open,
then the top camera finds the block and the box (the judge compares with it, the path
check keeps clear of the box). Then the policy drives, and the runtime takes the arm back
and judges where the block ended.
"""

from __future__ import annotations

from enum import StrEnum

from mecharm.runtime.engine import Outcome


class Stage(StrEnum):
    """The stages, in trial order; the values are the names on the wire."""

    OPEN_GRIPPER_HOME = "open_gripper_home"
    DETECT = "detect"
    ROLLOUT = "rollout"  # the policy at a fixed rate through the safe arm, until done or max_s
    RETREAT = "retreat"  # up the way it came (a closed gripper opened where it closed), HOME
    JUDGE_ROLLOUT = "judge_rollout"  # fresh mode off; the place judge: is the block in the box?
    DONE = "done"
    ABORT = "abort"


#: Anything not listed (every FAIL) goes to ABORT, then the rollout's way out (body.py).
TRANSITIONS: dict[tuple[Stage, Outcome], Stage] = {
    (Stage.OPEN_GRIPPER_HOME, Outcome.OK): Stage.DETECT,
    (Stage.DETECT, Outcome.OK): Stage.ROLLOUT,
    (Stage.ROLLOUT, Outcome.OK): Stage.RETREAT,
    (Stage.RETREAT, Outcome.OK): Stage.JUDGE_ROLLOUT,
    (Stage.JUDGE_ROLLOUT, Outcome.OK): Stage.DONE,
}

#: real-rig seconds per stage for the console; the rollout's own is its time limit's order
NOMINAL_S: dict[str, float] = {
    "open_gripper_home": 2.5, "detect": 8.0, "rollout": 30.0, "retreat": 10.0,
    "judge_rollout": 8.0,
}  # fmt: skip
