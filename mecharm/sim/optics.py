"""Profile part: the cameras' true optics and image effects (docs/simulation-optics.md).

Each camera has a TRUE pose, intrinsics and lens distortion that the runtime does
not know; ``nominal`` is what the operator's one-time checkerboard calibration would
report for it (close to the truth, not equal), the values the runtime is configured
with. ``ideal`` is the simulator before profiles: the runtime's own pinhole model, no
distortion, no shadows, no blur. ``rig`` places the top camera so the rig's logged
reference points land on the rig's pixels (+x to the left, +z down, about 1960 px/m
on the mat); ``harsh`` is worse than the rig in every effect.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "IDEAL_GAIN_RANGE",
    "OPTICS_PROFILES",
    "CameraOptics",
    "NominalCalibration",
    "OpticsProfile",
]

#: the random scene's lighting gain before profiles (kept so old seeds give the same scenes)
IDEAL_GAIN_RANGE = (0.90, 1.08)

#: a position in the world, metres (the rig is well inside a 5 m cube)
_M = Annotated[float, Field(ge=-5.0, le=5.0)]
#: one distortion coefficient (OpenCV's k1, k2, p1, p2, k3; real lenses are well within ±10)
_K = Annotated[float, Field(ge=-10.0, le=10.0)]
#: focal length and principal point, pixels
_F = Annotated[float, Field(ge=100.0, le=20000.0)]
_C = Annotated[float, Field(ge=0.0, le=10000.0)]
Vec3 = tuple[_M, _M, _M]
Dist = tuple[_K, _K, _K, _K, _K]


class NominalCalibration(BaseModel):
    """A camera's intrinsics as a checkerboard calibration reports them (OpenCV's K and
    k1, k2, p1, p2, k3): what the runtime's ``top_camera_calibration`` is set to."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    fx: _F
    fy: _F
    cx: _C
    cy: _C
    dist: Dist = (0.0, 0.0, 0.0, 0.0, 0.0)


class CameraOptics(BaseModel):
    """One camera: true pose and intrinsics, and what its image suffers."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    pos: Vec3
    look_at: Vec3
    roll_deg: float = Field(default=0.0, ge=-360, le=360)
    #: a real camera's handedness (the ideal cameras see the Unity frame's mirror image)
    mirror: bool = False
    size: tuple[Annotated[int, Field(ge=16, le=8192)], Annotated[int, Field(ge=16, le=8192)]] = (
        1920,
        1080,
    )
    #: pinhole with the principal point at the centre when fx is None
    fov_h_deg: float = Field(default=53.0, gt=1, lt=170)
    fx: _F | None = None
    fy: _F | None = None
    cx: _C | None = None
    cy: _C | None = None
    dist: Dist = (0.0, 0.0, 0.0, 0.0, 0.0)
    nominal: NominalCalibration | None = None
    #: JPEG quality of the stream (None: the workcell config's ``jpeg_quality``)
    jpeg_quality: int | None = Field(default=None, ge=10, le=100)
    #: exposure time: the arm is smeared over the path it moved in this time (0: no blur)
    exposure_ms: float = Field(default=0.0, ge=0, le=200)
    #: sensor noise = the scene's noise_sigma x this, plus more in the dark (auto gain)
    noise_scale: float = Field(default=1.0, ge=0, le=10)
    #: brightness lost at the image corners (0: none; 0.3: corners at 70 %)
    vignetting: float = Field(default=0.0, ge=0, le=0.8)
    #: Gaussian defocus of the static scene, pixels (0: sharp)
    defocus_px: float = Field(default=0.0, ge=0, le=5)

    @model_validator(mode="after")
    def _intrinsics_together(self) -> CameraOptics:
        given = [v is not None for v in (self.fx, self.fy, self.cx, self.cy)]
        if any(given) and not all(given):
            raise ValueError("fx, fy, cx, cy are given together (or none: pinhole from fov_h_deg)")
        return self


class OpticsProfile(BaseModel):
    """The cameras' true optics and image effects; the defaults are the ideal world."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    top: CameraOptics = CameraOptics(
        pos=(0.0, 0.86, -0.06), look_at=(0.0, 0.0, 0.23), size=(1920, 1080), fov_h_deg=53.0
    )
    side: CameraOptics = CameraOptics(
        pos=(0.62, 0.30, 0.70), look_at=(-0.02, 0.07, 0.20), size=(1280, 720), fov_h_deg=58.0
    )
    #: random scenes draw their lighting gain uniformly from this range
    gain_range: tuple[float, float] = IDEAL_GAIN_RANGE
    #: darkening of the mat under the arm, box and block by the one light (0: no shadows)
    shadow: float = Field(default=0.0, ge=0, le=0.9)

    @model_validator(mode="after")
    def _gain_in_schema(self) -> OpticsProfile:
        lo, hi = self.gain_range
        if not 0.8 <= lo <= hi <= 1.2:
            raise ValueError(f"gain_range {self.gain_range} must lie within the scene's 0.8..1.2")
        return self


# The rig's top camera: a 1080p webcam (about 70° horizontal field) 0.69 m above the mat,
# tilted 8° towards +z and turned so the base is at the top of the image. Pose fitted to the
# rig's logged reference points (docs/simulation-optics.md, "Reference points").
_RIG_TOP = CameraOptics(
    pos=(0.019, 0.693, 0.045),
    look_at=(0.019, 0.0, 0.142),
    roll_deg=179.4,
    mirror=True,
    size=(1920, 1080),
    fx=1405.0,
    fy=1398.0,
    cx=975.3,
    cy=528.6,
    dist=(-0.11, 0.05, 0.0008, -0.0006, -0.01),
    nominal=NominalCalibration(
        fx=1391.0, fy=1386.0, cx=968.0, cy=534.0, dist=(-0.097, 0.038, 0.0, 0.0, 0.0)
    ),
    jpeg_quality=75,
    exposure_ms=33.0,
    noise_scale=1.3,
    vignetting=0.18,
    defocus_px=0.6,
)
# The rig's side camera: a phone (1280x720, about 65° horizontal) on a stand.
_RIG_SIDE = CameraOptics(
    pos=(0.60, 0.31, 0.72),
    look_at=(-0.02, 0.07, 0.20),
    roll_deg=0.8,
    mirror=True,
    size=(1280, 720),
    fx=1002.0,
    fy=1002.0,
    cx=646.0,
    cy=355.0,
    dist=(-0.04, 0.02, 0.0, 0.0, 0.0),
    jpeg_quality=70,
    exposure_ms=25.0,
    noise_scale=1.5,
    vignetting=0.12,
)

OPTICS_PROFILES: dict[str, OpticsProfile] = {
    "ideal": OpticsProfile(),
    "rig": OpticsProfile(top=_RIG_TOP, side=_RIG_SIDE, gain_range=(0.8, 1.2), shadow=0.35),
    "harsh": OpticsProfile(
        top=_RIG_TOP.model_copy(
            update={
                "pos": (0.024, 0.688, 0.050),
                "roll_deg": 178.2,
                "fx": 1398.0,
                "fy": 1385.0,
                "cx": 992.0,
                "cy": 516.0,
                "dist": (-0.21, 0.09, 0.0015, -0.0012, -0.02),
                "nominal": NominalCalibration(
                    fx=1372.0, fy=1362.0, cx=981.0, cy=527.0, dist=(-0.175, 0.06, 0.0, 0.0, 0.0)
                ),
                "jpeg_quality": 50,
                "exposure_ms": 66.0,
                "noise_scale": 2.5,
                "vignetting": 0.35,
                "defocus_px": 1.2,
            }
        ),
        side=_RIG_SIDE.model_copy(
            update={
                "dist": (-0.09, 0.03, 0.0, 0.0, 0.0),
                "jpeg_quality": 45,
                "exposure_ms": 50.0,
                "noise_scale": 2.5,
                "vignetting": 0.3,
            }
        ),
        gain_range=(0.8, 1.2),
        shadow=0.55,
    ),
}
