"""Top-camera pixels <-> mat coordinates, from the four ArUco corner markers (docs/perception.md, detect).

The homography maps the mat plane (y = 0) to pixels. Objects stand above the
mat (the block's top face at 25 mm, the box rim at 43 mm), so a point seen at
height h must be mapped through the plane y = h, or it is off by the parallax
(~7 mm for the block at 25 cm from the camera's nadir). The camera pose needed
for that is recovered from the homography itself: the focal length is
self-calibrated (square pixels, principal point at the image centre) unless
configured, then H = K [r_x r_z t] gives R and t.

A calibrated top camera (``PerceptionConfig.top_camera``: the operator's checkerboard
calibration) brings its own K and lens distortion: every pixel is undistorted before
it meets the homography, and mat points are distorted on their way back to pixels,
so all callers keep working in the camera's raw pixels (docs/simulation-optics.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np
from numpy.typing import NDArray

from mecharm.runtime.perception.config import (
    DEFAULT_CONFIG,
    CameraCalibration,
    PerceptionConfig,
)

__all__ = [
    "HomographyError",
    "MatHomography",
    "detect_markers",
    "estimate_homography",
    "undistort_pixels",
]

_DICT = cv2.aruco.getPredefinedDictionary(cv2.aruco.DICT_4X4_50)


def _detector() -> cv2.aruco.ArucoDetector:
    params = cv2.aruco.DetectorParameters()
    params.cornerRefinementMethod = cv2.aruco.CORNER_REFINE_SUBPIX
    params.cornerRefinementWinSize = 5
    return cv2.aruco.ArucoDetector(_DICT, params)


class HomographyError(RuntimeError):
    """The mat homography cannot be computed; ``missing`` names the corner markers not found."""

    def __init__(self, reason: str, missing: Sequence[str] = ()) -> None:
        super().__init__(reason)
        self.reason = reason
        self.missing = list(missing)


def _check_frame(frame: Any, what: str = "frame") -> NDArray[np.uint8]:
    if (
        not isinstance(frame, np.ndarray)
        or frame.dtype != np.uint8
        or frame.ndim != 3
        or frame.shape[2] != 3
    ):
        desc = f"{type(frame).__name__} {getattr(frame, 'shape', '')} {getattr(frame, 'dtype', '')}"
        raise ValueError(f"{what} must be a BGR uint8 image of shape (h, w, 3), got {desc.strip()}")
    return frame


def detect_markers(frame: NDArray[np.uint8]) -> dict[int, NDArray[np.float64]]:
    """ArUco markers in one BGR frame: id -> (4, 2) corner pixels (OpenCV order)."""
    gray = cv2.cvtColor(_check_frame(frame), cv2.COLOR_BGR2GRAY)
    corners, ids, _ = _detector().detectMarkers(gray)
    out: dict[int, NDArray[np.float64]] = {}
    if ids is None:
        return out
    for c, i in zip(corners, ids.ravel(), strict=True):
        out.setdefault(int(i), c.reshape(4, 2).astype(np.float64))
    return out


@dataclass
class MatHomography:
    """Mat-plane homography plus the camera pose recovered from it."""

    H: NDArray[np.float64]  # (x, z, 1) on the mat -> pixel (u, v, 1)
    image_size: tuple[int, int]  # (width, height)
    focal_px: float
    R: NDArray[np.float64]  # world (Unity x, y, z) -> camera
    t: NDArray[np.float64]
    n_frames: int = 0
    reproj_error_px: float = 0.0
    markers_seen: dict[str, int] = field(default_factory=dict)
    #: the calibrated top camera (None: pinhole, principal point at the centre); H then maps
    #: the mat to UNDISTORTED pixels
    calibration: CameraCalibration | None = None
    #: the markers as detected in the first frame (id -> (4, 2) raw pixels), for the stage
    #: image's overlay (docs/stage-images.md); not serialized
    first_frame_markers: dict[int, NDArray[np.float64]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        self.H = np.asarray(self.H, dtype=np.float64)
        self.H_inv = np.linalg.inv(self.H)
        w, h = self.image_size
        c = self.calibration
        if c is None:
            self.K = np.array(
                [
                    [self.focal_px, 0.0, (w - 1) / 2.0],
                    [0.0, self.focal_px, (h - 1) / 2.0],
                    [0, 0, 1.0],
                ]
            )
        else:
            self.K = np.array([[c.fx, 0.0, c.cx], [0.0, c.fy, c.cy], [0, 0, 1.0]])
        self.K_inv = np.linalg.inv(self.K)
        self.dist = np.array(c.dist, dtype=np.float64) if c is not None and any(c.dist) else None
        self.camera_center = -self.R.T @ self.t

    # ---------------------------------------------------------------- lens
    @property
    def distorted(self) -> bool:
        """The image has lens distortion to undo (a calibration with non-zero coefficients)."""
        return self.dist is not None

    def undistort(self, uv: NDArray[np.float64]) -> NDArray[np.float64]:
        """Raw (N, 2) pixels -> the pixels an ideal pinhole with the same K would have seen."""
        pts = np.asarray(uv, dtype=np.float64).reshape(-1, 2)
        if self.dist is None:
            return pts
        return undistort_pixels(pts, self.K, self.dist)

    def distort(self, uv: NDArray[np.float64]) -> NDArray[np.float64]:
        """Ideal pinhole (N, 2) pixels -> raw pixels (the inverse of ``undistort``)."""
        pts = np.asarray(uv, dtype=np.float64).reshape(-1, 2)
        if self.dist is None:
            return pts
        k1, k2, p1, p2, k3 = self.dist
        x = (pts[:, 0] - self.K[0, 2]) / self.K[0, 0]
        y = (pts[:, 1] - self.K[1, 2]) / self.K[1, 1]
        r2 = x * x + y * y
        radial = 1.0 + r2 * (k1 + r2 * (k2 + r2 * k3))
        xd = x * radial + 2.0 * p1 * x * y + p2 * (r2 + 2.0 * x * x)
        yd = y * radial + p1 * (r2 + 2.0 * y * y) + 2.0 * p2 * x * y
        return np.column_stack([xd * self.K[0, 0] + self.K[0, 2], yd * self.K[1, 1] + self.K[1, 2]])

    # ---------------------------------------------------------------- mapping
    def plane(self, height: float = 0.0) -> NDArray[np.float64]:
        """Homography of the horizontal plane y = ``height`` (mat coords -> pixels)."""
        if height == 0.0:
            return self.H
        m = self.K @ np.column_stack([self.R[:, 0], self.R[:, 2], self.t + height * self.R[:, 1]])
        return m / m[2, 2]

    def pixels_to_xz(self, uv: NDArray[np.float64], height: float = 0.0) -> NDArray[np.float64]:
        """Map (N, 2) pixels to (N, 2) mat (x, z) on the plane y = ``height``."""
        pts = self.undistort(uv).reshape(-1, 1, 2)
        inv = self.H_inv if height == 0.0 else np.linalg.inv(self.plane(height))
        return np.asarray(cv2.perspectiveTransform(pts, inv), dtype=np.float64).reshape(-1, 2)

    def xzs_to_pixels(self, xz: NDArray[np.float64], height: float = 0.0) -> NDArray[np.float64]:
        pts = np.asarray(xz, dtype=np.float64).reshape(-1, 1, 2)
        return self.distort(
            np.asarray(cv2.perspectiveTransform(pts, self.plane(height)), dtype=np.float64)
        ).reshape(-1, 2)

    def square_to_pixels(
        self, x: float, z: float, half: float, yaw_deg: float, height: float = 0.0
    ) -> NDArray[np.float64]:
        """The 4 corners of a square (centre x, z, half side, yaw) on the plane y = ``height``,
        in frame pixels: a block's face or a box's rim as the camera sees it."""
        a = math.radians(yaw_deg)
        c, s = math.cos(a), math.sin(a)
        local = np.array([[half, half], [-half, half], [-half, -half], [half, -half]])
        return self.xzs_to_pixels(local @ np.array([[c, -s], [s, c]]).T + [x, z], height)

    def pixel_to_xz(self, u: float, v: float, height: float = 0.0) -> tuple[float, float]:
        x, z = self.pixels_to_xz(np.array([[u, v]]), height)[0]
        return float(x), float(z)

    def xz_to_pixel(self, x: float, z: float, height: float = 0.0) -> tuple[float, float]:
        u, v = self.xzs_to_pixels(np.array([[x, z]]), height)[0]
        return float(u), float(v)

    def mm_per_px(self, x: float, z: float, height: float = 0.0) -> float:
        """Local scale near (x, z): millimetres on the plane per image pixel."""
        u, v = self.xz_to_pixel(x, z, height)
        a = self.pixels_to_xz(np.array([[u - 5, v], [u + 5, v], [u, v - 5], [u, v + 5]]), height)
        return float((np.linalg.norm(a[1] - a[0]) + np.linalg.norm(a[3] - a[2])) / 20.0 * 1000.0)

    # ---------------------------------------------------------------- (de)serialization
    def to_dict(self) -> dict[str, Any]:
        extra = {} if self.calibration is None else {"calibration": self.calibration.model_dump()}
        return {
            "H": self.H.tolist(),
            "image_size": list(self.image_size),
            "focal_px": round(self.focal_px, 3),
            "camera_center_xyz": [round(float(c), 5) for c in self.camera_center],
            "R": self.R.tolist(),
            "t": self.t.tolist(),
            "n_frames": self.n_frames,
            "reproj_error_px": round(self.reproj_error_px, 4),
            "markers_seen": dict(self.markers_seen),
            **extra,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MatHomography:
        return cls(
            H=np.array(d["H"], dtype=np.float64),
            image_size=(int(d["image_size"][0]), int(d["image_size"][1])),
            focal_px=float(d["focal_px"]),
            R=np.array(d["R"], dtype=np.float64),
            t=np.array(d["t"], dtype=np.float64),
            n_frames=int(d.get("n_frames", 0)),
            reproj_error_px=float(d.get("reproj_error_px", 0.0)),
            markers_seen=dict(d.get("markers_seen", {})),
            calibration=(
                CameraCalibration(**d["calibration"]) if d.get("calibration") is not None else None
            ),
        )

    @classmethod
    def from_homography(
        cls,
        H: NDArray[np.float64],
        image_size: tuple[int, int],
        focal_px: float | None = None,
        calibration: CameraCalibration | None = None,
        **kw: Any,
    ) -> MatHomography:
        """Recover the camera pose from ``H`` (the mat -> undistorted pixels when ``calibration``
        is given); without one, self-calibrate the focal length when not given."""
        H = np.asarray(H, dtype=np.float64) / H[2, 2]
        w, h = image_size
        if calibration is not None:
            K = np.array(
                [
                    [calibration.fx, 0, calibration.cx],
                    [0, calibration.fy, calibration.cy],
                    [0, 0, 1.0],
                ]
            )
            focal_px = float(np.sqrt(calibration.fx * calibration.fy))
        else:
            cx, cy = (w - 1) / 2.0, (h - 1) / 2.0
            if focal_px is None:
                focal_px = _self_calibrate(H, cx, cy)
            K = np.array([[focal_px, 0, cx], [0, focal_px, cy], [0, 0, 1.0]])
        m = np.linalg.inv(K) @ H
        lam = (np.linalg.norm(m[:, 0]) + np.linalg.norm(m[:, 1])) / 2.0
        m = m / lam
        if m[2, 2] < 0:  # the mat is in front of the camera
            m = -m
        r_x, r_z, t = m[:, 0], m[:, 1], m[:, 2]
        r_y = np.cross(r_z, r_x)
        if float(r_y @ t) > 0:
            # the camera would be under the mat: the frame is the other-handed one (the Unity
            # frame is left-handed; a real camera sees it so, the ideal simulator mirrored)
            r_y = -r_y
        u, _, vt = np.linalg.svd(np.column_stack([r_x, r_y, r_z]))
        R = u @ vt
        return cls(
            H=H,
            image_size=(int(w), int(h)),
            focal_px=float(focal_px),
            R=R,
            t=t,
            calibration=calibration,
            **kw,
        )


def _self_calibrate(H: NDArray[np.float64], cx: float, cy: float) -> float:
    """Focal length from one plane homography (Zhang's constraints, known principal point)."""
    T = np.array([[1.0, 0, -cx], [0, 1.0, -cy], [0, 0, 1.0]])
    a, b = T @ H[:, 0], T @ H[:, 1]
    # With w = 1/f^2: r_x . r_z = 0 and |r_x| = |r_z|, solved in the least-squares sense.
    A = np.array([a[0] * b[0] + a[1] * b[1], a[0] ** 2 + a[1] ** 2 - b[0] ** 2 - b[1] ** 2])
    c = np.array([a[2] * b[2], a[2] ** 2 - b[2] ** 2])
    denom = float(A @ A)
    wv = -float(A @ c) / denom if denom > 0 else -1.0
    if not np.isfinite(wv) or wv <= 0:
        raise HomographyError(
            "cannot self-calibrate the top camera's focal length from the mat (camera looks straight "
            "down?); set perception.focal_px"
        )
    return float(1.0 / np.sqrt(wv))


def undistort_pixels(
    uv: NDArray[np.float64], K: NDArray[np.float64], dist: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Raw pixels -> ideal pinhole pixels (same K), iterated to well below a hundredth of a pixel."""
    pts = np.asarray(uv, dtype=np.float64).reshape(-1, 1, 2)
    if hasattr(cv2, "undistortPointsIter"):  # OpenCV 4: the criteria's own function
        out = cv2.undistortPointsIter(pts, K, dist, None, K, _UNDISTORT_CRITERIA)
    else:  # OpenCV 5 folded it into undistortPoints (same solver, same result)
        out = cv2.undistortPoints(pts, K, dist, P=K, criteria=_UNDISTORT_CRITERIA)
    return np.asarray(out, dtype=np.float64).reshape(-1, 2)


_UNDISTORT_CRITERIA = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 40, 1e-10)


def _dihedral(c: NDArray[np.float64]) -> list[NDArray[np.float64]]:
    """The 8 orderings of a marker's 4 corners (rotations, and mirrored)."""
    out: list[NDArray[np.float64]] = []
    for seq in (c, c[::-1]):
        out.extend(np.roll(seq, -k, axis=0) for k in range(4))
    return out


def _match_corners(
    config: PerceptionConfig, corners: dict[int, NDArray[np.float64]]
) -> dict[int, NDArray[np.float64]]:
    """Each marker's detected corners in the order of its configured mat corners.

    The detector reports a marker's corners in the printed pattern's own order; whether that
    is the configured order depends on how the mat was printed and on the camera's handedness
    (a real camera vs the ideal simulator's mirrored one). The marker centres fix a first
    homography; each marker keeps the ordering (of its 8 rotations and mirror images) that lies
    nearest to its configured corners under it. The configured order wins unless another is
    nearer, so an image that matched before matches the same.
    """
    ms = list(config.markers)
    centres_w = np.array([m.center_xz for m in ms], dtype=np.float64)
    centres_i = np.array([corners[m.id].mean(axis=0) for m in ms], dtype=np.float64)
    H0, _ = cv2.findHomography(centres_w, centres_i, 0)
    if H0 is None or not np.all(np.isfinite(H0)):
        return corners
    out = dict(corners)
    for m in ms:
        proj = cv2.perspectiveTransform(
            np.array(m.corners_xz, dtype=np.float64).reshape(-1, 1, 2), H0
        ).reshape(-1, 2)
        options = _dihedral(corners[m.id])
        errs = [float(np.sum((o - proj) ** 2)) for o in options]
        best = int(np.argmin(errs))
        if errs[best] < errs[0]:
            out[m.id] = options[best]
    return out


def estimate_homography(
    frames: Sequence[NDArray[np.uint8]], config: PerceptionConfig = DEFAULT_CONFIG
) -> MatHomography:
    """Mat homography from the four corner markers, averaged over ``frames``.

    Each marker's corners are averaged over the frames that saw it; a marker
    seen in fewer than ``config.min_marker_fraction`` of the frames counts as
    missing. Raises HomographyError naming the missing markers (or another
    reason: no frames, frames of different sizes, degenerate geometry).
    """
    if not frames:
        raise HomographyError("no frames given for the mat homography")
    size = None
    sums: dict[int, NDArray[np.float64]] = {}
    counts: dict[int, int] = {}
    first: dict[int, NDArray[np.float64]] = {}
    for i, frame in enumerate(frames):
        _check_frame(frame, f"frame {i}")
        fsize = (frame.shape[1], frame.shape[0])
        if size is None:
            size = fsize
        elif fsize != size:
            raise HomographyError(
                f"frame {i} is {fsize[0]}x{fsize[1]}, frame 0 is {size[0]}x{size[1]}"
            )
        found = detect_markers(frame)
        if i == 0:
            first = found
        for mid, c in found.items():
            sums[mid] = sums.get(mid, 0) + c
            counts[mid] = counts.get(mid, 0) + 1
    assert size is not None
    n = len(frames)
    need = max(1, int(np.ceil(config.min_marker_fraction * n)))
    seen = {m.name: counts.get(m.id, 0) for m in config.markers}
    missing = [m for m in config.markers if counts.get(m.id, 0) < need]
    if missing:
        names = ", ".join(
            f"{m.name} (id {m.id}, seen in {counts.get(m.id, 0)}/{n} frames)" for m in missing
        )
        raise HomographyError(f"mat corner marker(s) missing: {names}", [m.name for m in missing])
    cal = config.top_camera
    mean = {m.id: np.asarray(sums[m.id] / counts[m.id], dtype=np.float64) for m in config.markers}
    if cal is not None and any(cal.dist):
        K = np.array([[cal.fx, 0, cal.cx], [0, cal.fy, cal.cy], [0, 0, 1.0]])
        dist = np.array(cal.dist, dtype=np.float64)
        mean = {k: undistort_pixels(v, K, dist) for k, v in mean.items()}
    mean = _match_corners(config, mean)
    mat_pts = np.array([c for m in config.markers for c in m.corners_xz], dtype=np.float64)
    img_pts = np.concatenate([mean[m.id] for m in config.markers])
    H, _ = cv2.findHomography(mat_pts, img_pts, 0)
    if H is None or not np.all(np.isfinite(H)) or abs(np.linalg.det(H)) < 1e-12:
        raise HomographyError("degenerate marker geometry: the homography could not be solved")
    proj = cv2.perspectiveTransform(mat_pts.reshape(-1, 1, 2), H).reshape(-1, 2)
    err = float(np.sqrt(np.mean(np.sum((proj - img_pts) ** 2, axis=1))))
    return MatHomography.from_homography(
        np.asarray(H, dtype=np.float64),
        size,
        config.focal_px,
        calibration=cal,
        n_frames=n,
        reproj_error_px=err,
        markers_seen=seen,
        first_frame_markers=first,
    )
