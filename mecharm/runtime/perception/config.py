"""What perception must know about the physical workcell: the printed mat, the block, the box.

On the real rig these are measured once (print the mat, measure the box) and
entered in the runtime's YAML under ``perception:``; the defaults describe the
simulated workcell (docs/workcell.md), which is built to the same figures.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "DEFAULT_CONFIG",
    "CameraCalibration",
    "MarkerSpec",
    "PerceptionConfig",
    "default_markers",
]


class MarkerSpec(BaseModel):
    """One ArUco corner marker (DICT_4X4_50) printed on the mat.

    ``corners_xz`` are the mat coordinates (metres, Unity x/z) of the marker's
    four corners in OpenCV's order (top-left, top-right, bottom-right,
    bottom-left of the marker image).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    id: int = Field(ge=0, lt=50)
    corners_xz: tuple[
        tuple[float, float], tuple[float, float], tuple[float, float], tuple[float, float]
    ]

    @property
    def center_xz(self) -> tuple[float, float]:
        xs = [c[0] for c in self.corners_xz]
        zs = [c[1] for c in self.corners_xz]
        return (sum(xs) / 4.0, sum(zs) / 4.0)


def _marker(name: str, mid: int, cx: float, cz: float, side: float) -> MarkerSpec:
    h = side / 2.0
    # Image top-left maps to (+x, +z): seen from above with the base at the
    # bottom of the picture, the printed marker reads the right way round.
    return MarkerSpec(
        name=name,
        id=mid,
        corners_xz=((cx + h, cz + h), (cx - h, cz + h), (cx - h, cz - h), (cx + h, cz - h)),
    )


def default_markers(side: float = 0.040) -> tuple[MarkerSpec, ...]:
    """The four corner markers of the standard mat (x -0.36..0.36, z 0.04..0.42 m)."""
    return (
        _marker("near_minus_x", 0, -0.33, 0.07, side),
        _marker("near_plus_x", 1, 0.33, 0.07, side),
        _marker("far_plus_x", 2, 0.33, 0.39, side),
        _marker("far_minus_x", 3, -0.33, 0.39, side),
    )


_K = Annotated[float, Field(ge=-10.0, le=10.0)]


class CameraCalibration(BaseModel):
    """The top camera's intrinsics from a one-time checkerboard calibration (OpenCV's camera
    matrix and distortion k1, k2, p1, p2, k3, e.g. ``cv2.calibrateCamera``), at the resolution
    the runtime captures. Pixels are undistorted with it before the mat homography
    (docs/simulation-optics.md, "The operator's calibration")."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    fx: float = Field(ge=100, le=20000, description="focal length, pixels, along the image's x")
    fy: float = Field(ge=100, le=20000, description="focal length, pixels, along the image's y")
    cx: float = Field(ge=0, le=10000, description="principal point x, pixels")
    cy: float = Field(ge=0, le=10000, description="principal point y, pixels")
    #: real lenses are well within |k| <= 10; beyond it the undistortion diverges
    dist: tuple[_K, _K, _K, _K, _K] = Field(
        default=(0.0, 0.0, 0.0, 0.0, 0.0), description="k1, k2, p1, p2, k3"
    )


class PerceptionConfig(BaseModel):
    """Geometry and thresholds of the top-camera perception (runtime YAML key ``perception``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    markers: tuple[MarkerSpec, ...] = Field(default_factory=default_markers)
    mat_x: tuple[float, float] = (-0.36, 0.36)
    mat_z: tuple[float, float] = (0.04, 0.42)
    min_marker_fraction: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="a marker must be seen in at least this share of the frames",
    )
    focal_px: float | None = Field(
        default=None,
        gt=0,
        description="top-camera focal length; None = self-calibrated from the mat homography",
    )
    top_camera: CameraCalibration | None = Field(
        default=None,
        description="the top camera's calibrated intrinsics and lens distortion; None = a "
        "pinhole self-calibrated from the mat (principal point at the image centre)",
    )
    block_size_m: float = Field(default=0.025, gt=0)
    box_inner_m: float = Field(default=0.070, gt=0, description="inner side of the (square) box")
    box_wall_m: float = Field(default=0.004, gt=0)
    box_height_m: float = Field(default=0.043, gt=0)
    box_floor_m: float = Field(default=0.003, ge=0)
    box_search_x: tuple[float, float] = Field(
        default=(-0.31, -0.07), description="template-matching window, x"
    )
    box_search_z: tuple[float, float] = Field(
        default=(0.07, 0.31), description="template-matching window, z"
    )
    tip_marker_radius_m: float = Field(
        default=0.007, gt=0, description="green ball at the gripper tip"
    )
    red_s_min: int = Field(default=110, ge=0, le=255, description="block: minimum HSV saturation")
    red_v_min: int = Field(default=50, ge=0, le=255, description="block: minimum HSV value")
    white_s_max: int = Field(default=60, ge=0, le=255, description="box: maximum HSV saturation")
    white_v_min: int = Field(
        default=185, ge=0, le=255, description="box: minimum HSV value (lower it in dim light)"
    )
    white_v_auto: bool = Field(
        default=True,
        description="box not found at white_v_min: search again with a threshold taken from "
        "the frame's brightest grey (dim light, a vignetting lens)",
    )

    @field_validator("markers")
    @classmethod
    def _four_distinct(cls, v: tuple[MarkerSpec, ...]) -> tuple[MarkerSpec, ...]:
        if len(v) != 4:
            raise ValueError(f"the mat needs exactly 4 corner markers, got {len(v)}")
        if len({m.id for m in v}) != 4 or len({m.name for m in v}) != 4:
            raise ValueError("corner marker ids and names must be distinct")
        return v

    @property
    def box_outer_m(self) -> float:
        return self.box_inner_m + 2.0 * self.box_wall_m


DEFAULT_CONFIG = PerceptionConfig()
