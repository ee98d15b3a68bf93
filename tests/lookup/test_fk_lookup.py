"""fk_lookup semantics, case by case (docs/lookup.md)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mecharm.runtime.lookup import FkLookupResult, FkTable, fk_lookup

METHODS = ("brute", "indexed")


def table_of(rows: list[list[float]]) -> FkTable:
    return FkTable.from_rows(np.array(rows, dtype=float))


SAFE = [0.0, 40.0, 0.0, 0.0, -30.0, -30.0]


def row(x: float, y: float, z: float, joints: list[float] = SAFE) -> list[float]:
    return [x, y, z, *joints]


@pytest.fixture
def small() -> FkTable:
    return table_of(
        [
            row(0.20, 0.020, 0.25),  # 0 in band, safe
            row(0.21, 0.020, 0.25),  # 1 in band, 10 mm away
            row(0.20, 0.040, 0.25),  # 2 at ee_y_max: outside
            row(0.20, 0.010, 0.26),  # 3 at ee_y_min: inside
            row(0.195, 0.020, 0.25, [0, 88.5, 0, 0, -30, -30]),  # 4 nearest but j1 > 88
            row(0.199, 0.020, 0.25, [0, 40, 70, 0, -30, -30]),  # 5 nearest but j2 beyond SDK
            row(0.30, 0.015, 0.30, [0, 88.0, 0, 10, -30, -20]),  # 6 j1 exactly 88: allowed
        ]
    )


@pytest.mark.parametrize("method", METHODS)
def test_nearest_in_band_passing_safety(small: FkTable, method: str) -> None:
    r = fk_lookup(small, "pick", (0.1985, 0.25), 0.010, 0.040, method=method)
    assert r.ok and r.selected_index == 0 and r.pose_id == "fk_row_0"
    assert r.angles == tuple(SAFE)
    assert r.resid_x == pytest.approx(0.0015) and r.resid_z == pytest.approx(0.0)
    assert r.distance == pytest.approx(0.0015)
    assert r.selected_ee_y == 0.020 and r.joint_limit_ok and r.violations == ()
    assert r.counts is None and r.reason is None and r.method == method


@pytest.mark.parametrize("method", METHODS)
def test_band_is_half_open(small: FkTable, method: str) -> None:
    # row 2 sits at ee_y = 0.040 = ee_y_max: excluded; row 3 at ee_y_min: included
    r = fk_lookup(small, "pick", (0.20, 0.26), 0.010, 0.040, method=method)
    assert r.selected_index == 3
    r = fk_lookup(small, "pick", (0.20, 0.25), 0.040, 0.050, method=method)
    assert r.selected_index == 2


@pytest.mark.parametrize("method", METHODS)
def test_j1_88_is_the_line(small: FkTable, method: str) -> None:
    r = fk_lookup(small, "pick", (0.30, 0.30), 0.010, 0.040, method=method)
    assert r.ok and r.selected_index == 6 and r.angles[1] == 88.0


def test_joint_violations_listed() -> None:
    t = table_of([row(0.2, 0.02, 0.25, [0, 90, 70, 0, 0, 0])])
    r = fk_lookup(t, "pick", (0.2, 0.25), 0.0, 0.05)
    assert not r.ok and r.reason_code == "no_candidates"
    assert r.counts == {"band": 1, "safety": 0}
    assert "safety" in r.reason


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(
    ("kwargs", "emptied", "expected_counts"),
    [
        ({"ee_y_min": 0.5, "ee_y_max": 0.6}, "band", {"band": 0, "safety": 0}),
        ({"j3_ref": 50.0}, "j3", {"band": 6, "safety": 4, "j3": 0}),
        ({"j3_ref": 0.0, "j5_ref": 10.0}, "j5", {"band": 6, "safety": 4, "j3": 3, "j5": 0}),
        (
            {"ref_joints": [90, 40, 0, 0, -30, -30], "joint_tol": 15.0},
            "ref_joints",
            {"band": 6, "safety": 4, "ref_joints": 0},
        ),
    ],
)
def test_out_of_range_names_the_filter_that_emptied_the_set(
    small: FkTable, method: str, kwargs: dict, emptied: str, expected_counts: dict
) -> None:
    args = {"ee_y_min": 0.010, "ee_y_max": 0.040, **kwargs}
    lo, hi = args.pop("ee_y_min"), args.pop("ee_y_max")
    r = fk_lookup(small, "pick", (0.2, 0.25), lo, hi, method=method, **args)
    assert not r.ok and r.reason_code == "no_candidates"
    assert r.counts == expected_counts
    assert f"after the {emptied} filter" in r.reason
    assert r.selected_index is None and r.angles is None and r.nearest_index is None


@pytest.mark.parametrize("method", METHODS)
def test_too_far_reports_the_nearest(small: FkTable, method: str) -> None:
    r = fk_lookup(small, "pick", (0.0, 0.0), 0.010, 0.040, method=method)
    assert not r.ok and r.reason_code == "too_far"
    assert r.nearest_index == 0 and r.selected_index is None and r.angles is None
    assert r.distance == pytest.approx(np.hypot(0.2, 0.25))
    assert "dist_max" in r.reason and r.counts == {"band": 6, "safety": 4}
    r = fk_lookup(small, "pick", (0.0, 0.0), 0.010, 0.040, dist_max=0.5, method=method)
    assert r.ok and r.selected_index == 0


@pytest.mark.parametrize("method", METHODS)
def test_floor_applies_to_the_chosen_row(small: FkTable, method: str) -> None:
    r = fk_lookup(small, "pick", (0.20, 0.26), 0.010, 0.040, ee_y_floor=0.015, method=method)
    assert not r.ok and r.reason_code == "below_floor" and r.nearest_index == 3
    # a floor does not filter: the nearest row is still row 3, not a higher one
    r = fk_lookup(small, "pick", (0.20, 0.26), 0.010, 0.040, ee_y_floor=0.010, method=method)
    assert r.ok and r.selected_index == 3


@pytest.mark.parametrize("method", METHODS)
def test_j3_j5_and_ref_bands_filter(method: str) -> None:
    t = table_of(
        [
            row(0.200, 0.02, 0.25, [0, 40, 0, 20, -30, -30]),
            row(0.205, 0.02, 0.25, [0, 40, 0, 0, -30, -30]),
            row(0.206, 0.02, 0.25, [0, 40, 0, 0, -30, 0]),
            row(0.207, 0.02, 0.25, [20, 40, 0, 0, -30, -30]),
        ]
    )
    assert fk_lookup(t, "pick", (0.2, 0.25), 0, 0.05, method=method).selected_index == 0
    assert fk_lookup(t, "pick", (0.2, 0.25), 0, 0.05, j3_ref=0.0, method=method).selected_index == 1
    assert (
        fk_lookup(
            t, "pick", (0.2, 0.25), 0, 0.05, j3_ref=3.0, band_deg=3.0, method=method
        ).selected_index
        == 1
    )
    assert (
        fk_lookup(t, "pick", (0.2, 0.25), 0, 0.05, j3_ref=3.0, band_deg=2.9, method=method).ok
        is False
    )
    assert fk_lookup(t, "pick", (0.2, 0.25), 0, 0.05, j5_ref=0.0, method=method).selected_index == 2
    r = fk_lookup(
        t,
        "pick",
        (0.2, 0.25),
        0,
        0.05,
        ref_joints=[20, 40, 0, 0, -30, -30],
        joint_tol=10,
        method=method,
    )
    assert r.selected_index == 3 and r.max_dj == 0.0 and r.ref_joints == (20, 40, 0, 0, -30, -30)
    r = fk_lookup(
        t,
        "pick",
        (0.2, 0.25),
        0,
        0.05,
        ref_joints=[10, 40, 0, 0, -30, -30],
        joint_tol=10,
        method=method,
    )
    assert r.selected_index == 1 and r.max_dj == 10.0 and r.joint_tol == 10.0


@pytest.mark.parametrize("method", METHODS)
def test_ties_choose_the_lowest_row(method: str) -> None:
    t = table_of(
        [
            row(
                0.375 + 1 / 64, 0.02, 0.25
            ),  # dyadic values: the three below are exactly 0.125 away
            row(0.25, 0.02, 0.375, [1, 40, 0, 0, -30, -30]),
            row(0.25, 0.02, 0.125, [2, 40, 0, 0, -30, -30]),
            row(0.25, 0.02, 0.375, [3, 40, 0, 0, -30, -30]),
        ]
    )
    r = fk_lookup(t, "pick", (0.25, 0.25), 0, 0.05, dist_max=0.2, method=method)
    assert r.selected_index == 1
    r = fk_lookup(
        t,
        "pick",
        (0.25, 0.25),
        0,
        0.05,
        dist_max=0.2,
        ref_joints=[3, 40, 0, 0, -30, -30],
        joint_tol=1.5,
        method=method,
    )
    assert r.selected_index == 2  # row 1 (j0 = 1) is 2.0 away from the ref


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"phase": "descend"}, "phase"),
        ({"target_xz": (0.2,)}, "target_xz"),
        ({"target_xz": "ab"}, "target_xz"),
        ({"target_xz": (0.2, "z")}, r"target_xz\[1\]"),
        ({"target_xz": (0.2, float("nan"))}, r"target_xz\[1\]"),
        ({"ee_y_min": 0.04, "ee_y_max": 0.04}, "ee_y_min"),
        ({"ee_y_min": "low"}, "ee_y_min"),
        ({"dist_max": 0.0}, "dist_max"),
        ({"j3_ref": "12"}, "j3_ref"),
        ({"j5_ref": None, "band_deg": -1.0}, "band_deg"),
        ({"j5_ref": [1.0]}, "j5_ref"),
        ({"ref_joints": [0, 0, 0, 0, 0], "joint_tol": 15.0}, "ref_joints"),
        ({"ref_joints": [0, 0, 0, 0, 0, "x"], "joint_tol": 15.0}, r"ref_joints\[5\]"),
        ({"ref_joints": [0, 0, 0, 0, 0, 0]}, "joint_tol"),
        ({"ref_joints": [0, 0, 0, 0, 0, 0], "joint_tol": 0.0}, "joint_tol"),
        ({"ref_joints": [0, 0, 0, 0, 0, 0], "joint_tol": "15"}, "joint_tol"),
        ({"joint_tol": 15.0}, "joint_tol"),
        ({"ee_y_floor": True}, "ee_y_floor"),
        ({"method": "fast"}, "method"),
    ],
)
def test_invalid_input_raises_naming_the_argument(small: FkTable, kwargs: dict, names: str) -> None:
    args = {"phase": "pick", "target_xz": (0.2, 0.25), "ee_y_min": 0.01, "ee_y_max": 0.04, **kwargs}
    with pytest.raises(ValueError, match=names):
        fk_lookup(small, **args)


def test_every_phase_is_accepted(small: FkTable) -> None:
    from mecharm.runtime.lookup import PHASES

    assert PHASES == ("approach_pick", "pick", "approach_place", "place_withblock", "place_noblock")
    for ph in PHASES:
        assert fk_lookup(small, ph, (0.2, 0.25), 0.01, 0.04).phase == ph


@pytest.mark.parametrize("target", [(0.1985, 0.25), (0.0, 0.0), (0.2, 0.26)])
def test_to_dict_round_trips_through_json(small: FkTable, target: tuple[float, float]) -> None:
    r = fk_lookup(
        small,
        "place_withblock",
        target,
        0.010,
        0.040,
        ref_joints=SAFE,
        joint_tol=15.0,
        j3_ref=0.0,
        ee_y_floor=0.015,
    )
    text = json.dumps(r.to_dict(), sort_keys=True)
    back = FkLookupResult.from_dict(json.loads(text))
    assert back == r
    assert json.dumps(back.to_dict(), sort_keys=True) == text


def test_from_dict_rejects_incomplete_records() -> None:
    with pytest.raises(ValueError, match="lacks"):
        FkLookupResult.from_dict({"ok": True})
