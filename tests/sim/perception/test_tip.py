"""Tip measurement after the pick descend and block location in the gripper, against ground truth."""

from __future__ import annotations

import json
import math

import cv2
import numpy as np
import pytest

from mecharm.runtime.perception import detect_block, estimate_homography, locate_block, measure_tip


@pytest.mark.parametrize(("dx", "dz"), [(0.0, 0.0), (0.008, -0.005), (-0.006, 0.009)])
def test_tip_offset_matches_truth(rig, dx: float, dz: float) -> None:
    tx, ty, tz = rig.tip(rig.PICK)
    rig.layout((tx - dx, tz - dz), (-0.2, 0.18))  # tip - block = (dx, dz)
    home = [rig.wc.render("top") for _ in range(2)]
    H = estimate_homography(home)
    block = detect_block(home[0], H)
    assert block is not None
    rig.move(rig.PICK)
    m = measure_tip(rig.wc.render("top"), H, block, tip_height_m=ty)
    assert m is not None
    assert m.dx_mm == pytest.approx(dx * 1000, abs=1.5)
    assert m.dz_mm == pytest.approx(dz * 1000, abs=1.5)
    assert m.dist_mm == pytest.approx(math.hypot(dx, dz) * 1000, abs=1.5)
    assert json.loads(json.dumps(m.to_dict()))["tip_height_m"] == pytest.approx(ty, abs=1e-5)


def test_no_marker_no_measurement(rig) -> None:
    home = [rig.wc.render("top") for _ in range(2)]
    H = estimate_homography(home)
    block = detect_block(home[0], H)
    f = rig.wc.render("top")
    hsv = cv2.cvtColor(f, cv2.COLOR_BGR2HSV)
    green = cv2.inRange(hsv, (35, 60, 40), (90, 255, 255))
    f[cv2.dilate(green, np.ones((5, 5), np.uint8)) > 0] = (45, 45, 50)  # marker covered
    assert measure_tip(f, H, block) is None


def test_held_block_is_located_above_the_box(rig) -> None:
    tx, pick_y, tz = rig.tip(rig.PICK)
    rig.layout((tx, tz), (-0.2, 0.18))
    H = estimate_homography([rig.wc.render("top") for _ in range(2)])
    rig.move(rig.PICK)
    rig.grip(close=True)
    rig.move(rig.PLACE)
    t = rig.wc.truth()
    assert t["grasped"]
    place_y = rig.tip(rig.PLACE)[1]
    top = place_y + 0.025 - pick_y
    b = locate_block(rig.wc.render("top"), H, height_m=top, near_xz=(t["tip"][0], t["tip"][2]))
    assert b is not None
    # partly hidden under the gripper: a few mm are fine for the servo's 8 mm tolerance
    assert math.hypot(b.x - t["block"]["x"], b.z - t["block"]["z"]) * 1000 < 4.0
