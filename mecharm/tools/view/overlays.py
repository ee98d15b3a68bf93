"""Where things are in a top-camera image: the mat grid, the markers, the box rim, the errors.

The trace keeps what perception found (the block's and box's pixels and mat
positions, tip offsets, held-block positions) but not the mat homography, so it is
found again from the trial's ``*_mat.jpg`` with the runtime's own
``estimate_homography`` and the camera calibration the trial ran with. Mat points
are mapped through the plane at their height (block top, box rim), as perception
does (docs/perception.md). Pure geometry: ``rerunlog`` turns it into Rerun primitives.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from numpy.typing import NDArray

from mecharm.runtime.config import recorded_constant
from mecharm.runtime.perception import (
    DEFAULT_CONFIG,
    MatHomography,
    PerceptionConfig,
    estimate_homography,
)
from mecharm.tools.view.trialfiles import stage_images

__all__ = [
    "BLOCK_M",
    "BOX_RIM_M",
    "MAT_X",
    "MAT_Z",
    "box_outline",
    "find_homography",
    "grid_strips",
    "marker_strips",
]

#: the mat's extent (x -0.36..0.36, z 0.04..0.42 m: the standard mat, docs/perception.md)
MAT_X, MAT_Z = (-0.36, 0.36), (0.04, 0.42)
GRID_STEP_M = 0.04
BLOCK_M = DEFAULT_CONFIG.block_size_m
BOX_RIM_M = DEFAULT_CONFIG.box_height_m
#: the box's outer size when a detection does not give one (mm)
BOX_SIZE_MM = (78.0, 78.0)


def find_homography(
    run_dir: Path, constants: dict[str, Any]
) -> tuple[MatHomography | None, str | None]:
    """(homography, None) from the first mat image, or (None, why not); (None, None) when
    the folder has no mat image at all (a dry run, a trace outside its folder)."""
    mats = [p for p in stage_images(run_dir) if p.name.endswith("_mat.jpg")]  # raw when kept
    if not mats:
        return None, None
    try:
        frame = cv2.imread(str(mats[0]), cv2.IMREAD_COLOR)
        if frame is None:
            raise ValueError("not a readable JPEG")
        config = PerceptionConfig(
            top_camera=recorded_constant(constants, "perception.top_camera_calibration")
        )
        return estimate_homography([np.asarray(frame, dtype=np.uint8)], config), None
    except Exception as exc:  # an overlay is never a reason to fail the recording
        return None, f"{mats[0].name}: {exc}"


def marker_strips(H: MatHomography) -> tuple[list[NDArray[np.float64]], list[str]]:
    """Each corner marker's outline in pixels (closed), and its name."""
    strips, names = [], []
    for m in DEFAULT_CONFIG.markers:
        px = H.xzs_to_pixels(np.asarray(m.corners_xz, dtype=np.float64))
        strips.append(np.vstack([px, px[:1]]))
        names.append(m.name)
    return strips, names


def grid_strips(H: MatHomography, samples: int = 12) -> list[NDArray[np.float64]]:
    """The mat's grid lines in pixels (sampled, so lens distortion bends them as it should)."""
    (x0, x1), (z0, z1) = MAT_X, MAT_Z
    along_z, along_x = np.linspace(z0, z1, samples), np.linspace(x0, x1, samples)
    strips = [
        H.xzs_to_pixels(np.column_stack([np.full(samples, x), along_z]))
        for x in np.arange(x0, x1 + 1e-9, GRID_STEP_M)
    ]
    strips += [
        H.xzs_to_pixels(np.column_stack([along_x, np.full(samples, z)]))
        for z in np.arange(z0, z1 + 1e-9, GRID_STEP_M)
    ]
    return strips


def box_rim_xz(
    xz: tuple[float, float] | list[float], size_mm: list[float] | None, yaw_deg: float
) -> NDArray[np.float64]:
    """The box rim's corners on the mat (closed), from its detected centre, size and yaw."""
    sx, sz = size_mm or BOX_SIZE_MM
    hx, hz = sx / 2000, sz / 2000
    c, s = math.cos(math.radians(yaw_deg)), math.sin(math.radians(yaw_deg))
    corners = ((hx, hz), (-hx, hz), (-hx, -hz), (hx, -hz), (hx, hz))
    return np.array([(xz[0] + c * dx - s * dz, xz[1] + s * dx + c * dz) for dx, dz in corners])


def box_outline(
    H: MatHomography, xz: tuple[float, float] | list[float], size_mm: list[float] | None, yaw_deg: float
) -> NDArray[np.float64]:  # fmt: skip
    """The box rim in pixels (mapped at rim height)."""
    return H.xzs_to_pixels(box_rim_xz(xz, size_mm, yaw_deg), height=BOX_RIM_M)
