"""j0_lookup over adopted arcs, the arc files and the shipped approach poses."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mecharm.common.kinematics import fk_tip
from mecharm.runtime.lookup import ArcPose, J0LookupResult, adopt_arc, j0_lookup, load_arc
from mecharm.runtime.lookup.build import APPROACH_PICK_BASE, APPROACH_PLACE_BASE
from mecharm.runtime.lookup.j0 import DEFAULT_PICK_ARC, DEFAULT_PLACE_ARC, bearing_deg, save_arc

BASE = (57.39, 17.49, 0.08, -89.2, -29.44)


def arc3() -> ArcPose:
    return ArcPose(
        "t", "approach_place", BASE, ((-0.3, 0.20, 60.0), (-0.2, 0.18, 40.0), (-0.1, 0.19, 20.0))
    )


def test_interpolates_by_x_with_zero_x_residual() -> None:
    r = j0_lookup(arc3(), (-0.25, 0.10))
    assert r.ok and r.segment == 0 and r.t == pytest.approx(0.5)
    assert r.j0 == pytest.approx(50.0) and r.angles == (r.j0, *BASE)
    assert r.resid_x == 0.0
    assert r.resid_z == pytest.approx(0.19 - 0.10)  # arc z at that x minus target z


def test_arc_points_are_hit_exactly() -> None:
    for x, z, j0 in arc3().points:
        r = j0_lookup(arc3(), (x, z))
        assert r.ok and r.j0 == pytest.approx(j0) and r.resid_z == pytest.approx(0.0, abs=1e-12)
    assert j0_lookup(arc3(), (-0.1, 0.19)).segment == 1
    assert j0_lookup(arc3(), (-0.2, 0.18)).segment == 1 and j0_lookup(arc3(), (-0.2, 0.18)).t == 0.0


@pytest.mark.parametrize(("x", "seg", "t", "j0"), [(-0.35, 0, 0.0, 60.0), (-0.05, 1, 1.0, 20.0)])
def test_outside_the_arc_is_out_of_range(x: float, seg: int, t: float, j0: float) -> None:
    r = j0_lookup(arc3(), (x, 0.2))
    assert not r.ok and "outside the arc" in r.reason
    assert (r.segment, r.t, r.j0) == (seg, t, j0) and r.resid_x != 0.0


def test_joint_limit_verdict() -> None:
    arc = ArcPose("t", "approach_pick", (90.0, 0, 0, 0, 0), ((0.0, 0.2, 0.0), (0.1, 0.2, -10.0)))
    r = j0_lookup(arc, (0.05, 0.2))
    assert not r.ok and not r.joint_limit_ok and any("j1" in v for v in r.violations)


@pytest.mark.parametrize("bad", [(0.1,), ("a", 0.2), (0.1, float("inf")), None])
def test_bad_target_raises(bad: object) -> None:
    with pytest.raises(ValueError, match="target_xz"):
        j0_lookup(arc3(), bad)  # type: ignore[arg-type]


def test_result_round_trips() -> None:
    r = j0_lookup(arc3(), (-0.23, 0.2))
    assert J0LookupResult.from_dict(json.loads(json.dumps(r.to_dict()))) == r


def test_save_and_load(tmp_path: Path) -> None:
    save_arc(tmp_path / "a.json", arc3())
    assert load_arc(tmp_path / "a.json") == arc3()


@pytest.mark.parametrize(
    ("doc", "match"),
    [
        ("not json", "not valid JSON"),
        ("[]", "top level"),
        ('{"name": "a", "phase": "approach_place", "points": []}', "base_j1_j5"),
        (
            '{"name": "a", "phase": "nope", "base_j1_j5": [1,2,3,4,5], "points": [{"x":0,"z":0,"j0":0},{"x":1,"z":0,"j0":0}]}',
            "phase",
        ),
        ('{"name": "a", "phase": "pick", "base_j1_j5": [1,2,3,4], "points": []}', "5 values"),
        (
            '{"name": "a", "phase": "pick", "base_j1_j5": [1,2,3,4,5], "points": [{"x":0,"z":0}]}',
            r"points\[0\]",
        ),
        (
            '{"name": "a", "phase": "pick", "base_j1_j5": [1,2,3,4,5], "points": [{"x":0,"z":0,"j0":"a"}]}',
            "points",
        ),
        (
            '{"name": "a", "phase": "pick", "base_j1_j5": [1,2,3,4,5], "points": [{"x":0,"z":0,"j0":0},{"x":0,"z":1,"j0":1}]}',
            "increasing",
        ),
    ],
)
def test_bad_arc_files_name_the_problem(tmp_path: Path, doc: str, match: str) -> None:
    p = tmp_path / "arc.json"
    p.write_text(doc)
    with pytest.raises(ValueError, match=match) as info:
        load_arc(p)
    assert str(p) in str(info.value)


def test_missing_arc_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read"):
        load_arc(tmp_path / "none.json")


@pytest.mark.parametrize(
    ("path", "base"),
    [(DEFAULT_PICK_ARC, APPROACH_PICK_BASE), (DEFAULT_PLACE_ARC, APPROACH_PLACE_BASE)],
)
def test_shipped_arcs_aim_the_tip_at_the_target_bearing(
    path: Path, base: tuple[float, ...]
) -> None:
    arc = load_arc(path)
    assert arc.base == base and len(arc.points) == 20
    for x, z, j0 in arc.points:
        tip = fk_tip([j0, *arc.base])
        assert bearing_deg(float(tip[0]), float(tip[2])) == pytest.approx(
            bearing_deg(x, z), abs=0.01
        )


def test_shipped_arcs_cover_the_regions() -> None:
    pick, place = load_arc(DEFAULT_PICK_ARC), load_arc(DEFAULT_PLACE_ARC)
    assert pick.x_range[0] <= 0.14 and pick.x_range[1] >= 0.24
    assert place.x_range[0] <= -0.33 and place.x_range[1] >= -0.05  # the whole hole-map grid
    # the rig's observation: block at (+0.20, +0.26) picked with j0 ~ -32, box (-0.20, 0.18) ~ +39
    assert -45 < j0_lookup(pick, (0.20, 0.26)).j0 < -25
    assert 30 < j0_lookup(place, (-0.20, 0.18)).j0 < 55


def test_adopt_arc_reproduces_the_shipped_file() -> None:
    """The documented `mecharm fk adopt-arc` arguments regenerate configs/poses exactly."""
    a = adopt_arc("approach_place", "approach_place", APPROACH_PLACE_BASE, (-0.35, -0.03), 0.19)
    assert a == load_arc(DEFAULT_PLACE_ARC)
    b = adopt_arc("approach_pick", "approach_pick", APPROACH_PICK_BASE, (0.03, 0.35), 0.24)
    assert b == load_arc(DEFAULT_PICK_ARC)
    assert np.all(np.diff([p[2] for p in b.points]) < 0)  # monotone in x
