"""Policies of the caller's for the rollout tests (``python:tests.tasks.rollout_policies:NAME``).

Each factory takes the runtime's settings and returns a callable policy, as the rollout task
expects of a ``python:`` policy (docs/rollouts.md).
"""

from __future__ import annotations

from typing import Any

from mecharm.runtime.control import Action, Observation


def reach_too_far(settings: Any) -> Any:
    """Lean j1 forward toward 120° (past the guard's j1 limit and into the mat), then stop:
    every step is bounded; the ones the guard or the path check refuse are not sent."""
    home = tuple(settings.arm.home)
    ticks = [0]

    def policy(obs: Observation) -> Action | None:
        ticks[0] += 1
        if ticks[0] > 150:
            return None
        return Action((home[0], 120.0, *home[2:]), None)

    return policy


def close_and_stop(settings: Any) -> Any:
    """Move the tool out over the mat, close the gripper on nothing, end with it closed: the
    rollout's way back opens it where it closed, then goes up and HOME."""
    home = tuple(settings.arm.home)
    out = (home[0] + 20.0, 25.0, -10.0, *home[3:])
    ticks = [0]

    def policy(obs: Observation) -> Action | None:
        ticks[0] += 1
        if ticks[0] <= 15:
            return Action(out, None)
        if ticks[0] <= 20:
            return Action(out, 20)
        return None

    return policy


def let_go_and_go_on(settings: Any) -> Any:
    """Close the gripper on nothing out over the mat, open it again (a release: the judge
    looks, sees no block in the box), then hold on for a while and end: a miss does not end
    the episode, the policy does. Out on the side away from the box of the scene the test
    runs (seed 11301: the box at j1 ~35°), so that the arm does not hide it from the look."""
    home = tuple(settings.arm.home)
    out = (home[0] - 20.0, 25.0, -10.0, *home[3:])
    ticks = [0]

    def policy(obs: Observation) -> Action | None:
        ticks[0] += 1
        if ticks[0] > 200:
            return None
        grip = 20 if 15 < ticks[0] <= 70 else 100
        return Action(out, grip if ticks[0] > 15 else None)

    return policy


def wants_the_side_camera(settings: Any) -> Any:
    """A policy that asks for a camera a rollout cannot give: refused at load."""

    def policy(obs: Observation) -> Action | None:
        return None

    policy.cameras = ("side",)  # type: ignore[attr-defined]
    return policy
