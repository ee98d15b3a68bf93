"""The place servo's depth steps (docs/stages.md, "servo_place"): solved from the arm's pose,
they move the tip in z and keep what the j0 servo did; they never leave the place band or
move a joint farther than the continuity bound, whatever the aim."""

from __future__ import annotations

import math
import random

import pytest

from mecharm.common.config import load_settings
from mecharm.common.kinematics import fk_tip
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.guard import check_pose
from mecharm.runtime.pick_place import pick

# make run's second scene (seed 8, rig profile): where the j0 servo converged over the box,
# and the band its place cell used. The table row the old depth step chose for a 32 mm
# z correction turned j0 by -10.8° and the forearm's roll by -10°: the block swung 28 mm
# off the box centre and the release was refused.
SERVO_POSE = (65.75, 57.39, 12.49, 10.08, -74.2, -29.44)
BAND = (0.09, 0.12)


def _tip_xz(pose: tuple[float, ...]) -> tuple[float, float]:
    t = fk_tip(pose)
    return float(t[0]), float(t[2])


def test_a_depth_step_moves_the_tip_in_z_and_keeps_the_servos_j0() -> None:
    s = RuntimeSettings()
    x, z = _tip_xz(SERVO_POSE)
    height = float(fk_tip(SERVO_POSE)[1])
    for dz_mm in (-32.0, -8.0, 12.0):
        aim = (x, z - dz_mm / 1000.0)
        pose, how, why = pick._fine_step(s, SERVO_POSE, aim, BAND, where="place")
        assert why is None and pose is not None, why
        assert how == "fine"
        got = _tip_xz(pose)
        # at the aim within the pick servo's residual, or at least half the way there
        resid = math.dist(got, aim)
        assert resid <= max(s.pick_place.pick_resid_max_m, abs(dz_mm) / 2000.0), (dz_mm, resid)
        assert abs(got[0] - x) < 0.004  # x kept: the servo's work stays done
        assert abs(float(fk_tip(pose)[1]) - height) < 0.002  # the height kept
        jumps = [abs(a - b) for a, b in zip(pose, SERVO_POSE, strict=True)]
        assert max(jumps) <= s.arm.joint_step_max_deg + 1e-6
        assert jumps[3] < 2.0  # the forearm's roll kept: the block does not swing
        assert check_pose(pose, j1_max=s.arm.j1_max).ok


def test_no_aim_makes_a_depth_step_leave_its_band_or_its_joint_bound() -> None:
    """Attacker's aims: far, behind the base, NaN. A fine step is a pose within the bound and
    the band, or no pose with the reason."""
    s = RuntimeSettings()
    rng = random.Random(23)
    x, z = _tip_xz(SERVO_POSE)
    aims = [(x + rng.uniform(-0.2, 0.2), z + rng.uniform(-0.2, 0.2)) for _ in range(40)]
    aims += [(0.0, 0.0), (x, z + 0.5), (float("nan"), z)]
    refused = 0
    for aim in aims:
        pose, _how, why = pick._fine_step(s, SERVO_POSE, aim, BAND, where="place")
        if pose is None:
            assert why and ("band" in why or "aim" in why), why
            refused += 1
            continue
        assert all(math.isfinite(v) for v in pose)
        jumps = [abs(a - b) for a, b in zip(pose, SERVO_POSE, strict=True)]
        assert max(jumps) <= s.arm.joint_step_max_deg + 1e-6
        assert BAND[0] <= float(fk_tip(pose)[1]) < BAND[1]
        assert pose[1] <= s.arm.j1_max
    assert refused >= 3  # the far ones and the NaN are refused, not reached


def test_the_table_rows_depth_step_is_gone() -> None:
    with pytest.raises(ValueError, match="depth_step: removed setting"):
        load_settings(RuntimeSettings, overrides={"depth_step": "lookup"})
