"""The pose guard: limits, j1 <= 88°, lookup verdict."""

from __future__ import annotations

from mecharm.runtime.guard import check_pose


def test_guard_cases() -> None:
    assert check_pose([0, 0, 0, 0, 0, -30]).ok
    assert check_pose([0, 88.0, 0, 0, 0, 0]).ok
    v = check_pose([0, 88.01, 0, 0, 0, 0])
    assert not v.ok and "j1 = 88.01 above the safety limit 88" in v.reason
    assert "j0" in check_pose([161, 0, 0, 0, 0, 0]).reason
    assert "j2" in check_pose([0, 0, 66, 0, 0, 0]).reason
    assert "not finite" in check_pose([0, 0, 0, float("nan"), 0, 0]).reason
    assert "5 values" in check_pose([0, 0, 0, 0, 0]).reason
    assert "not a list of numbers" in check_pose(["a", 0, 0, 0, 0, 0]).reason
    v = check_pose(
        [0, 0, 0, 0, 0, 0], lookup_ok=False, lookup_reason="nearest 41 mm > dist_max 30 mm"
    )
    assert not v.ok and "out_of_range: nearest 41 mm" in v.reason
    assert not check_pose([0, 80, 0, 0, 0, 0], j1_max=75).ok
