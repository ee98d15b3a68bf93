"""Physics of the simulated workcell against ground truth: grasp, miss, carry, place, rim, collisions."""

from __future__ import annotations

import math

import pytest
from structlog.testing import capture_logs

from mecharm.sim.physics import GRASP_XZ_TOL_M, GRIP_CONTACT, classify_drop
from mecharm.sim.scene import BLOCK_SIZE_M, BOX_FLOOR_M, BOX_HEIGHT_M, BOX_INNER_M, BOX_OUTER_M


def _pick_layout(
    rig, dx: float = 0.0, dz: float = 0.0, box: tuple[float, float] | None = None
) -> None:
    tx, _, tz = rig.tip(rig.PICK)
    px, _, pz = rig.tip(rig.PLACE)
    rig.layout((tx + dx, tz + dz), box or (px, pz))


def test_grasp_when_tip_is_at_block_and_block_follows_tip(rig) -> None:
    _pick_layout(rig, dx=0.004, dz=-0.003)
    rig.move(rig.PICK)
    rig.grip(close=True)
    t = rig.wc.truth()
    assert t["grasped"] is True
    assert t["block"]["resting_on"] == "gripper"
    assert [e["kind"] for e in t["events"]] == ["grasp"]
    # the jaws stop on the block instead of closing to 20
    assert rig.arm.true_gripper() == pytest.approx(GRIP_CONTACT, abs=0.5)
    before = (t["block"]["x"], t["block"]["y"], t["block"]["z"])
    rig.move(rig.HOME)
    after = rig.wc.truth()["block"]
    tip = rig.tip(rig.HOME)
    # the block keeps its offset to the tip
    off = (
        before[0] - rig.tip(rig.PICK)[0],
        before[1] - rig.tip(rig.PICK)[1],
        before[2] - rig.tip(rig.PICK)[2],
    )
    assert after["x"] == pytest.approx(tip[0] + off[0], abs=1e-6)
    assert after["y"] == pytest.approx(tip[1] + off[1], abs=1e-6)
    assert after["y"] > 0.15


@pytest.mark.parametrize(("dx", "dz"), [(0.020, 0.0), (0.0, -0.016), (0.010, 0.010)])
def test_poor_approach_misses(rig, dx: float, dz: float) -> None:
    assert math.hypot(dx, dz) > GRASP_XZ_TOL_M
    _pick_layout(rig, dx, dz)
    rig.move(rig.PICK)
    with capture_logs() as logs:
        rig.grip(close=True)
    t = rig.wc.truth()
    assert t["grasped"] is False
    miss = [e for e in t["events"] if e["kind"] == "miss"]
    assert len(miss) == 1 and "from the block centre" in miss[0]["reason"]
    assert any(entry["event"] == "workcell_miss" for entry in logs)
    assert rig.arm.true_gripper() < 25  # nothing in the jaws: they close fully
    rig.move(rig.HOME)
    assert rig.wc.truth()["block"]["y"] == pytest.approx(BLOCK_SIZE_M / 2)  # still on the mat


def test_closing_high_above_the_block_misses(rig) -> None:
    _pick_layout(rig)
    high = (rig.PICK[0], 60.0, *rig.PICK[2:])  # same j0, tip far above the block
    rig.move(high)
    rig.grip(close=True)
    t = rig.wc.truth()
    assert t["grasped"] is False
    assert "above the block's bottom" in t["events"][-1]["reason"]


def test_closed_jaws_cannot_grasp(rig) -> None:
    _pick_layout(rig)
    rig.grip(close=True)  # close at HOME first
    rig.move(rig.PICK)
    rig.grip(close=True)
    assert rig.wc.truth()["grasped"] is False
    assert "not open" in rig.wc.truth()["events"][-1]["reason"]


def _carry_to_place(rig, box: tuple[float, float], box_yaw: float = 0.0) -> dict:
    tx, _, tz = rig.tip(rig.PICK)
    rig.layout((tx, tz), box, box_yaw=box_yaw)
    rig.move(rig.PICK)
    rig.grip(close=True)
    assert rig.wc.truth()["grasped"]
    rig.move(rig.PLACE)
    rig.grip(close=False)
    return rig.wc.truth()


def test_place_in_box(rig) -> None:
    px, _, pz = rig.tip(rig.PLACE)
    t = _carry_to_place(rig, (px + 0.010, pz - 0.012), box_yaw=20)
    assert t["place_outcome"] == "box"
    assert t["block"]["resting_on"] == "box"
    assert t["block"]["y"] == pytest.approx(BOX_FLOOR_M + BLOCK_SIZE_M / 2)
    assert t["grasped"] is False
    assert t["collisions"] == []
    assert rig.arm.true_gripper() > 95


def test_place_on_rim_is_a_failed_place(rig) -> None:
    px, _, pz = rig.tip(rig.PLACE)
    # block centre 35 mm from the box centre: it overlaps the wall
    t = _carry_to_place(rig, (px + BOX_INNER_M / 2, pz))
    assert t["place_outcome"] == "rim"
    assert t["block"]["y"] == pytest.approx(BOX_HEIGHT_M + BLOCK_SIZE_M / 2)
    assert t["collisions"] == []


def test_place_beside_box_drops_on_mat(rig) -> None:
    px, _, pz = rig.tip(rig.PLACE)
    t = _carry_to_place(rig, (px + 0.080, pz))
    assert t["place_outcome"] == "mat"
    assert t["block"]["y"] == pytest.approx(BLOCK_SIZE_M / 2)


def test_tip_descending_into_box_wall_is_a_collision(rig) -> None:
    tx, ty, tz = rig.tip(rig.PICK)
    assert ty < BOX_HEIGHT_M
    # the box's wall right under the pick tip; the block somewhere else
    rig.layout((0.14, 0.34), (tx - (BOX_INNER_M + BOX_OUTER_M) / 4, tz))
    with capture_logs() as logs:
        rig.move(rig.PICK)
    t = rig.wc.truth()
    kinds = [c["kind"] for c in t["collisions"]]
    assert kinds == ["box_wall"]
    assert t["collisions"][0]["tip"][1] < BOX_HEIGHT_M
    assert any(e["event"] == "workcell_collision" for e in logs)
    # staying in contact does not repeat the event; leaving and re-entering does
    rig.wc.step()
    assert len(rig.wc.truth()["collisions"]) == 1
    rig.move(rig.HOME)
    rig.move(rig.PICK)
    assert len(rig.wc.truth()["collisions"]) == 2


def test_held_block_swept_through_the_wall_is_a_collision(rig) -> None:
    tx, _, tz = rig.tip(rig.PICK)
    rig.layout((tx, tz), (-0.20, 0.18))
    rig.move(rig.PICK)
    rig.grip(close=True)
    # move the box so that the carried block is lowered into its wall
    rig.move(rig.HOME)
    with rig.wc.scene.lock:
        rig.wc.scene.box = (tx + (BOX_INNER_M + BOX_OUTER_M) / 4 + 0.0, tz, 0.0)
    rig.move(rig.PICK)
    kinds = {c["kind"] for c in rig.wc.truth()["collisions"]}
    assert "box_wall_with_block" in kinds


def test_healthy_trial_path_has_no_collision(rig) -> None:
    px, _, pz = rig.tip(rig.PLACE)
    t = _carry_to_place(rig, (px, pz))
    rig.move(rig.HOME)
    assert rig.wc.truth()["collisions"] == []
    assert t["place_outcome"] == "box"


def test_next_scene_resets_everything(rig) -> None:
    _pick_layout(rig)
    rig.move(rig.PICK)
    rig.grip(close=True)
    assert rig.wc.truth()["grasped"]
    t = rig.wc.next_scene(seed=11)
    assert t["grasped"] is False and t["place_outcome"] is None and t["events"] == []
    assert t["layout"]["seed"] == 11
    assert rig.arm.true_gripper() < GRIP_CONTACT  # jaws no longer blocked by the block
    rig.grip(close=False)
    rig.grip(close=True)
    assert rig.arm.true_gripper() < 25


@pytest.mark.parametrize(
    ("offset", "yaw", "expected"),
    [
        ((0.0, 0.0), 0.0, "box"),
        ((0.022, 0.0), 0.0, "box"),  # 22 + 12.5 = 34.5 < 35 mm
        ((0.0225 + 0.001, 0.0), 0.0, "rim"),
        ((0.020, 0.0), 45.0, "rim"),  # rotated block reaches 17.7 mm from its centre
        ((0.0, -0.040), 0.0, "rim"),
        ((0.0, 0.0395 + 0.0125 + 0.001), 0.0, "mat"),
        ((0.100, 0.100), 30.0, "mat"),
    ],
)
def test_classify_drop(offset: tuple[float, float], yaw: float, expected: str) -> None:
    box = (-0.2, 0.18, 0.0)
    assert classify_drop(box[0] + offset[0], box[1] + offset[1], yaw, box) == expected


def test_classify_drop_follows_box_rotation() -> None:
    # a block 30 mm off centre along the diagonal of a box rotated 45°: that is its side direction
    box = (0.0, 0.2, 45.0)
    d = 0.020 / math.sqrt(2)
    assert classify_drop(d, 0.2 + d, 45.0, box) == "box"
    assert classify_drop(d, 0.2 + d, 0.0, box) == "rim"
