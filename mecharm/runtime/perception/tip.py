"""Where the gripper tip really is, relative to the block, seen from the top camera (descend_pick).

The tip carries a green ball marker (radius ``tip_marker_radius_m``, centred on
the tool tip; on the real rig a green tab glued to the finger tips, visible
from above). Its centroid is mapped through the plane at the tip's height
(``tip_height_m`` = the ee_y of the chosen pick row) and compared with the
block found in detect: the offsets tip - block feed the correction memory
(docs/runtime.md, "Memories": aim = block - offset).
"""

from __future__ import annotations

import math

import cv2
import numpy as np
from numpy.typing import NDArray

from mecharm.runtime.perception.config import DEFAULT_CONFIG, PerceptionConfig
from mecharm.runtime.perception.homography import MatHomography, _check_frame
from mecharm.runtime.perception.results import BlockDetection, TipMeasurement

__all__ = ["find_tip_marker", "measure_tip"]


def find_tip_marker(
    frame: NDArray[np.uint8],
    H: MatHomography,
    tip_height_m: float,
    config: PerceptionConfig = DEFAULT_CONFIG,
) -> tuple[float, float, float, float] | None:
    """(u, v, x, z) of the green tip marker, or None when no plausible green blob is seen."""
    hsv = cv2.cvtColor(_check_frame(frame), cv2.COLOR_BGR2HSV)
    green = cv2.inRange(hsv, (40, 120, 70), (85, 255, 255))
    green = cv2.morphologyEx(green, cv2.MORPH_OPEN, np.ones((3, 3), np.uint8))
    n, _labels, stats, cents = cv2.connectedComponentsWithStats(green)
    if n <= 1:
        return None
    k = 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
    u, v = (float(c) for c in cents[k])
    x, z = H.pixel_to_xz(u, v, tip_height_m)
    area_mm2 = stats[k, cv2.CC_STAT_AREA] * H.mm_per_px(x, z, tip_height_m) ** 2
    expected = math.pi * (config.tip_marker_radius_m * 1000.0) ** 2
    if not 0.25 * expected <= area_mm2 <= 3.0 * expected:
        return None
    return u, v, x, z


def measure_tip(
    frame: NDArray[np.uint8],
    H: MatHomography,
    block: BlockDetection,
    tip_height_m: float = 0.025,
    config: PerceptionConfig = DEFAULT_CONFIG,
) -> TipMeasurement | None:
    """Tip vs block (dx_mm, dz_mm = tip - block; dist_mm), or None when the marker is not seen."""
    found = find_tip_marker(frame, H, tip_height_m, config)
    if found is None:
        return None
    u, v, x, z = found
    dx, dz = (x - block.x) * 1000.0, (z - block.z) * 1000.0
    return TipMeasurement(
        tip_x=x,
        tip_z=z,
        block_x=block.x,
        block_z=block.z,
        dx_mm=dx,
        dz_mm=dz,
        dist_mm=math.hypot(dx, dz),
        u=u,
        v=v,
        tip_height_m=tip_height_m,
    )
