"""The joint-continuity bound of fk_lookup (step_ref / step_max, docs/safety.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from mecharm.runtime.lookup import FkLookupResult, FkTable, build, fk_lookup
from mecharm.runtime.lookup.build import approach_lattice_bases, with_approach_lattices
from mecharm.runtime.lookup.descent import plan_pick_descent

APPROACH = (-30.0, 80.0, -40.0, 0.0, -70.0, -30.0)


def _table(rows: list[tuple[float, ...]]) -> FkTable:
    return FkTable.from_rows(np.array(rows, dtype=np.float64))


def _crafted() -> FkTable:
    """The nearest row to (0.20, 0.24) swings j4 by +76.5°; the second nearest keeps every
    joint within 15°; a third, farther, within 15° too."""
    return _table(
        [
            (0.2005, 0.02, 0.2400, -30.0, 80.0, -40.0, 0.0, 6.5, -30.0),  # 0.5 mm, j4 +76.5
            (0.2030, 0.02, 0.2400, -25.0, 70.0, -30.0, 5.0, -60.0, -30.0),  # 3 mm, all <= 10
            (0.2100, 0.02, 0.2400, -30.0, 78.0, -38.0, 0.0, -68.0, -30.0),  # 10 mm, tiny
            (0.2002, 0.10, 0.2400, -30.0, 80.0, -40.0, 0.0, -70.0, -30.0),  # above the band
        ]
    )


@pytest.mark.parametrize("method", ["indexed", "brute", "rig"])
def test_the_nearest_row_that_jumps_is_skipped(method: str) -> None:
    t = _crafted()
    free = fk_lookup(t, "pick", (0.20, 0.24), 0.0, 0.05, method=method)
    assert free.ok and free.selected_index == 0  # the jump, without the bound
    r = fk_lookup(
        t, "pick", (0.20, 0.24), 0.0, 0.05, step_ref=APPROACH, step_max=15.0, method=method
    )
    assert r.ok and r.selected_index == 1
    assert (
        r.angles is not None
        and max(abs(a - b) for a, b in zip(r.angles, APPROACH, strict=True)) <= 15
    )
    assert r.step_ref == APPROACH and r.step_max == 15.0 and r.max_dj == 10.0
    assert r.ref_joints is None and r.joint_tol is None  # the bound is not ref_joints


@pytest.mark.parametrize("method", ["indexed", "brute", "rig"])
def test_no_row_within_the_bound_names_the_joint_and_the_jump(method: str) -> None:
    t = _crafted()
    r = fk_lookup(
        t, "pick", (0.20, 0.24), 0.0, 0.05, step_ref=APPROACH, step_max=5.0, dist_max=0.005,
        method=method,
    )  # fmt: skip
    assert not r.ok and r.reason_code == "joint_step"
    assert r.reason is not None
    assert "no row within 5 mm keeps every joint within 5° of the reference pose" in r.reason
    assert "nearest needs j4 +76.5°" in r.reason
    # out of reach whatever the bound: the old reason stays
    far = fk_lookup(
        t, "pick", (0.5, 0.5), 0.0, 0.05, step_ref=APPROACH, step_max=5.0, method=method
    )
    assert not far.ok and far.reason_code == "too_far"


def test_with_ref_joints_the_tighter_box_applies_and_refs_must_agree() -> None:
    t = _crafted()
    r = fk_lookup(
        t, "pick", (0.20, 0.24), 0.0, 0.05,
        ref_joints=APPROACH, joint_tol=90.0, step_ref=APPROACH, step_max=15.0,
    )  # fmt: skip
    assert r.ok and r.selected_index == 1 and r.joint_tol == 90.0
    with pytest.raises(ValueError, match="step_ref must equal ref_joints"):
        fk_lookup(
            t, "pick", (0.2, 0.24), 0.0, 0.05,
            ref_joints=APPROACH, joint_tol=15.0, step_ref=(0,) * 6, step_max=15.0,
        )  # fmt: skip
    with pytest.raises(ValueError, match="go together"):
        fk_lookup(t, "pick", (0.2, 0.24), 0.0, 0.05, step_ref=APPROACH)
    with pytest.raises(ValueError, match="step_max must be > 0"):
        fk_lookup(t, "pick", (0.2, 0.24), 0.0, 0.05, step_ref=APPROACH, step_max=0.0)


def test_records_without_the_bound_are_unchanged_and_round_trip() -> None:
    t = _crafted()
    plain = fk_lookup(t, "pick", (0.20, 0.24), 0.0, 0.05)
    d = plain.to_dict()
    assert "step_ref" not in d and "step_max" not in d  # old traces compare equal
    assert FkLookupResult.from_dict(d) == plain
    bounded = fk_lookup(t, "pick", (0.20, 0.24), 0.0, 0.05, step_ref=APPROACH, step_max=15.0)
    d = bounded.to_dict()
    assert d["step_ref"] == list(APPROACH) and d["step_max"] == 15.0
    assert FkLookupResult.from_dict(d) == bounded


def test_approach_lattices_are_appended_and_deterministic() -> None:
    t = _crafted()
    bases = approach_lattice_bases((80.0, -40.0, 0.0, -70.0, -30.0), (-53.9, -5.4))
    assert [b[0] for b in bases] == [-60.0, -50.0, -40.0, -30.0, -20.0, -10.0, 0.0]
    big = with_approach_lattices(t, (80.0, -40.0, 0.0, -70.0, -30.0), (-53.9, -5.4))
    assert big.n_rows == t.n_rows + 7 * 16807
    assert np.array_equal(big.joints[: t.n_rows], t.joints)  # row numbers keep their meaning
    assert big.checksum != t.checksum
    # a second copy of the same rows (another load of the file) shares the built table
    assert (
        with_approach_lattices(_crafted(), (80.0, -40.0, 0.0, -70.0, -30.0), (-53.9, -5.4)) is big
    )
    build._AUGMENTED.clear()  # built again from nothing: the same rows and checksum
    again = with_approach_lattices(_crafted(), (80.0, -40.0, 0.0, -70.0, -30.0), (-53.9, -5.4))
    assert again is not big
    assert again.checksum == big.checksum and np.array_equal(again.joints, big.joints)


def test_approach_lattices_of_other_rows_under_the_same_checksum_are_built_for_them() -> None:
    """The shared table is keyed by the rows, not only by the checksum a caller passed."""
    t = _crafted()
    other = FkTable.from_rows(
        np.concatenate([t.xyz, t.joints], axis=1)[::-1].copy(), checksum=t.checksum
    )
    a = with_approach_lattices(t, (80.0, -40.0, 0.0, -70.0, -30.0), (-53.9, -5.4))
    b = with_approach_lattices(other, (80.0, -40.0, 0.0, -70.0, -30.0), (-53.9, -5.4))
    assert a is not b and np.array_equal(b.joints[: other.n_rows], other.joints)


def test_plan_uses_a_hover_when_the_approach_is_not_above_the_block() -> None:
    """A hover row above the block within 15° of a pick row, the approach far from both."""
    hover = (0.200, 0.100, 0.240, 0.0, 40.0, 0.0, 0.0, -60.0, -30.0)
    pick = (0.201, 0.020, 0.240, 5.0, 50.0, 10.0, 0.0, -50.0, -30.0)
    t = _table([hover, pick])
    plan = plan_pick_descent(
        t, (0.20, 0.24), APPROACH, pick_band=(0.01, 0.04), hover_band=(0.08, 0.14),
        dist_max=0.03, hover_dist_max=0.015, resid_max=0.005, step_max=15.0,
    )  # fmt: skip
    assert plan.direct.reason_code == "joint_step"
    assert plan.use_hover and plan.hover is not None and plan.hover.selected_index == 0
    assert plan.pick.selected_index == 1
    # with the pick row 20° from the hover there is no continuous descent at all
    far = _table([hover, (0.201, 0.020, 0.240, 5.0, 60.0, 10.0, 0.0, -50.0, -30.0)])
    plan = plan_pick_descent(
        far, (0.20, 0.24), APPROACH, pick_band=(0.01, 0.04), hover_band=(0.08, 0.14),
        dist_max=0.03, hover_dist_max=0.015, resid_max=0.005, step_max=15.0,
    )  # fmt: skip
    assert not plan.use_hover and not plan.pick.ok and plan.pick.reason_code == "joint_step"


def test_a_hover_the_arm_cannot_move_to_is_skipped_for_the_next() -> None:
    """``reachable`` (the path check from where the arm is) refuses the nearest hover: the
    plan takes the next one that has a bounded descent, or none."""
    wild = (0.200, 0.100, 0.240, -20.0, 15.0, 45.0, -150.0, 46.0, -30.0)  # wrist turned over
    tame = (0.205, 0.100, 0.240, 0.0, 40.0, 0.0, 0.0, -60.0, -30.0)
    under_wild = (0.201, 0.020, 0.240, -15.0, 25.0, 50.0, -140.0, 50.0, -30.0)
    under_tame = (0.202, 0.020, 0.240, 5.0, 50.0, 10.0, 0.0, -50.0, -30.0)
    t = _table([wild, tame, under_wild, under_tame])
    kw: dict[str, Any] = dict(
        pick_band=(0.01, 0.04), hover_band=(0.08, 0.14), dist_max=0.03,
        hover_dist_max=0.015, resid_max=0.0005, step_max=15.0,
    )  # fmt: skip
    free = plan_pick_descent(t, (0.20, 0.24), APPROACH, **kw)
    assert free.use_hover and free.hover is not None and free.hover.selected_index == 0
    asked: list[tuple[float, ...]] = []

    def no_wrist_flip(angles: Sequence[float]) -> bool:
        a = tuple(angles)
        asked.append(a)
        return abs(a[3]) < 90.0

    plan = plan_pick_descent(t, (0.20, 0.24), APPROACH, reachable=no_wrist_flip, **kw)
    assert plan.use_hover and plan.hover is not None and plan.hover.selected_index == 1
    assert plan.pick.selected_index == 3 and asked[0][3] == -150.0
    none = plan_pick_descent(t, (0.20, 0.24), APPROACH, reachable=lambda a: False, **kw)
    assert none.hover is None and not none.use_hover


def test_the_hover_that_stopped_a_harsh_trial_is_refused_by_the_path_check() -> None:
    """Seed 10323 on harsh: from the pick arc's pose, the straight joint path to a hover row
    with the wrist turned over dips the tool to the mat (the move was refused, the trial
    stopped); the planner now asks the same check before it chooses a hover."""
    from mecharm.runtime.pathcheck import Workspace, check_path

    arc = (-27.5976, 87.74, -38.33, 3.6, -70.11, -30.0)
    hover = (-20.0, 15.0, 45.0, -150.0, 46.0, -30.0)
    v = check_path(arc, hover, Workspace(mat_margin_m=0.005), into_box=False, step_deg=1.0)
    assert not v.ok and v.obstacle == "mat"
