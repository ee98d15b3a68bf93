"""The side camera's view before a release: is the red block above the white box?

Why a second view: the top camera sees the held block from above and can be
fooled by what it cannot see (a block hidden under the gripper, a block at another
height); the rig judged the place from the side camera before opening the gripper.
The side camera is not calibrated to the mat, so this check is image-only and
deliberately simple (docs/stages.md, "release: never blind"):

* the block is the largest red, saturated blob (at least ``min_block_px`` pixels);
* the box is the unsaturated (white, grey in shadow) blob right below it, in the
  band of columns under the block: the mat and the table are coloured, the block
  saturated red, the gripper dark; the wall behind is above the horizon;
* "above the box": the block's centre column lies within the box blob's columns
  (± a quarter block) and the block's bottom is no lower than the middle of the box
  blob: the camera looks down on the box, so its far rim shows above a block that
  hovers just over the near one, while a block at the rim's height or below has its
  bottom at the front wall.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np
from numpy.typing import NDArray

__all__ = ["SideView", "side_view"]


@dataclass(frozen=True)
class SideView:
    """``seen``: the red block is above the white box; ``reason`` says what was (not) found."""

    seen: bool
    reason: str
    details: dict[str, Any] = field(default_factory=dict)


def _blobs(mask: NDArray[np.uint8]) -> list[tuple[int, int, int, int, int]]:
    """(x, y, w, h, area) of the connected components, largest first."""
    n, _lab, stats, _c = cv2.connectedComponentsWithStats(mask, connectivity=8)
    out = [(int(x), int(y), int(w), int(h), int(a)) for x, y, w, h, a in stats[1:n, :5]]
    return sorted(out, key=lambda b: -b[4])


def side_view(
    frame: NDArray[np.uint8],
    *,
    min_block_px: int = 30,
    max_gap_blocks: float = 6.0,
    max_box_sat: int = 45,
    min_box_value: int = 70,
) -> SideView:
    """Check one BGR side frame; ``max_gap_blocks``: how far (in block heights) below the block
    the box's top may be."""
    if frame.ndim != 3 or frame.shape[2] != 3 or frame.size == 0:
        return SideView(False, f"not a BGR image (shape {frame.shape})")
    hsv = cv2.cvtColor(frame, cv2.COLOR_BGR2HSV)
    h, s, v = hsv[..., 0], hsv[..., 1], hsv[..., 2]
    red_px = (((h <= 8) | (h >= 172)) & (s >= 110) & (v >= 50)).astype(np.uint8) * 255
    red = np.asarray(cv2.morphologyEx(red_px, cv2.MORPH_OPEN, np.ones((3, 3), np.uint8)), np.uint8)
    blocks = [b for b in _blobs(red) if b[4] >= min_block_px]
    if not blocks:
        return SideView(False, "no red block in the side frame")
    bx, by, bw, bh, barea = blocks[0]
    bottom = by + bh
    cu = bx + bw / 2.0
    details: dict[str, Any] = {"block_px": [bx, by, bw, bh]}
    # the band of columns the box would fill under the block (it is ~3 blocks wide), from the
    # block's top down to max_gap_blocks block heights below it
    u0, u1 = max(0, int(cu - 2.5 * bw)), min(frame.shape[1], int(cu + 2.5 * bw) + 1)
    v0, v1 = by, min(frame.shape[0], int(bottom + max_gap_blocks * bh) + 1)
    grey_px = (s[v0:v1, u0:u1] <= max_box_sat) & (v[v0:v1, u0:u1] >= min_box_value)
    grey = np.asarray(
        cv2.morphologyEx(grey_px.astype(np.uint8) * 255, cv2.MORPH_OPEN, np.ones((3, 3), np.uint8)),
        np.uint8,
    )
    boxes = [
        b for b in _blobs(grey) if b[4] >= barea // 2 and b[1] + b[3] + v0 > bottom
    ]  # the box looks larger than the block (78 mm vs 25 mm) and reaches below it
    if not boxes:
        return SideView(False, "no white box below the red block in the side frame", details)
    x, y, w, hh, _area = boxes[0]
    box = (x + u0, y + v0, w, hh)
    details["box_px"] = list(box)
    if not box[0] - bw / 4.0 <= cu <= box[0] + box[2] + bw / 4.0:
        return SideView(False, "the red block is beside the white box, not above it", details)
    if bottom > box[1] + box[3] / 2.0:
        return SideView(False, "the red block is not above the white box's rim", details)
    return SideView(True, "red block above the white box", details)
