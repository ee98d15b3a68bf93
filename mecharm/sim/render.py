"""Pinhole rendering of the workcell for the simulated top and side cameras.

Flat-shaded polygons (painter's order, back faces culled) for the mat, the
ArUco corner markers, the box and the block; thick lines for the arm's links
from the FK chain; the gripper's fingers open with the actual gripper value; a
green ball marks the tool tip. Cost is kept low for a 2-core machine: the
static part (mat, markers, box, a block at rest, lighting) is rendered once per
scene change and cached; each frame copies it, draws the arm (and a held
block), then applies per-frame flicker and pre-generated sensor noise.

One concern: drawing the workcell for one camera; the static cache, the arm, the held block
and the sensor effects are steps of one frame.
"""

from __future__ import annotations

import functools
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
from numpy.typing import NDArray

from mecharm.sim.lensmaps import distortion_maps
from mecharm.sim.optics import CameraOptics
from mecharm.sim.scene import (
    BLOCK_SIZE_M,
    BOX_FLOOR_M,
    BOX_HEIGHT_M,
    BOX_INNER_M,
    BOX_OUTER_M,
    MARKERS,
    MAT_X,
    MAT_Z,
    SceneState,
)
from mecharm.sim.world_arm import WorldArm

__all__ = [
    "SIDE_CAMERA",
    "TIP_MARKER_RADIUS_M",
    "TOP_CAMERA",
    "Camera",
    "Renderer",
    "SceneSnapshot",
    "camera_of",
]

TIP_MARKER_RADIUS_M = 0.007
JAW_MAX_MM = 55.0  # jaw opening at gripper value 100
#: the least sensor noise of every simulated camera (grey levels): frames of a live feed never
#: repeat byte for byte, as a real sensor's do not (docs/perception.md, "Frozen feed")
SENSOR_NOISE_FLOOR = 0.5
_LIGHT = np.array([0.25, 1.0, -0.35]) / np.linalg.norm([0.25, 1.0, -0.35])
_SHIFT = 4
_SCALE = 1 << _SHIFT

# BGR base colours
MAT_BGR = (95, 80, 70)
TABLE_BGR = (105, 120, 140)
WALL_BGR = (200, 196, 190)
BLOCK_BGR = (35, 30, 205)
BOX_BGR = (250, 250, 248)
LINK_BGR = (150, 148, 145)
GRIPPER_BGR = (45, 45, 50)
MARKER_BGR = (40, 200, 40)
_LINK_WIDTH_M = (0.075, 0.055, 0.045, 0.040, 0.035, 0.030, 0.022)
_BLUR_MIN_DEG = 0.4  # joint travel during the exposure below which no blur is drawn
_BLUR_MAX_GAP_S = 0.25  # frames further apart say nothing about the path in between


def _on_mat(pts: NDArray[np.float64]) -> NDArray[np.float64]:
    """Points pushed along the one light's direction down to the mat (their shadows)."""
    p = np.asarray(pts, dtype=np.float64).reshape(-1, 3)
    h = np.maximum(p[:, 1], 0.0)[:, None]
    return p - h * (_LIGHT / _LIGHT[1])


class Camera:
    """A camera in the Unity frame: pinhole (square pixels, principal point at the image centre,
    from ``fov_h_deg``) unless explicit intrinsics ``fx, fy, cx, cy`` are given, plus optional
    Brown-Conrady lens distortion ``dist = (k1, k2, p1, p2, k3)`` (OpenCV's model).

    ``mirror``: the simulator's world is drawn as if the Unity frame were right-handed; it is
    left-handed, so the built-in ideal cameras see the mirror image of a real camera's view. A
    camera with ``mirror=True`` sees what a real camera sees (docs/simulation-optics.md);
    ``roll_deg`` turns it about its optical axis.
    """

    def __init__(
        self,
        name: str,
        pos: tuple[float, float, float],
        look_at: tuple[float, float, float],
        size: tuple[int, int],
        fov_h_deg: float,
        *,
        fx: float | None = None,
        fy: float | None = None,
        cx: float | None = None,
        cy: float | None = None,
        dist: tuple[float, ...] | None = None,
        roll_deg: float = 0.0,
        mirror: bool = False,
    ) -> None:
        self.name = name
        self.pos = np.asarray(pos, dtype=np.float64)
        self.look_at = np.asarray(look_at, dtype=np.float64)
        self.size = (int(size[0]), int(size[1]))
        self.fov_h_deg = float(fov_h_deg)
        self.roll_deg = float(roll_deg)
        self.mirror = bool(mirror)
        fwd = self.look_at - self.pos
        fwd /= np.linalg.norm(fwd)
        right = np.cross(fwd, [0.0, 1.0, 0.0])
        right /= np.linalg.norm(right)
        down = np.cross(fwd, right)
        if self.roll_deg:
            a = math.radians(self.roll_deg)
            right, down = (
                math.cos(a) * right + math.sin(a) * down,
                -math.sin(a) * right + math.cos(a) * down,
            )
        if self.mirror:
            right = -right
        self.R = np.stack([right, down, fwd])
        self.t = -self.R @ self.pos
        w, h = self.size
        self.f = (w / 2.0) / math.tan(math.radians(fov_h_deg) / 2.0) if fx is None else float(fx)
        self.fy = self.f if fy is None else float(fy)
        self.c = np.array(
            [(w - 1) / 2.0 if cx is None else float(cx), (h - 1) / 2.0 if cy is None else float(cy)]
        )
        self._explicit = fx is not None
        d = tuple(float(v) for v in (dist or ()))
        self.dist: tuple[float, ...] | None = (
            (d + (0.0,) * 5)[:5] if any(v != 0.0 for v in d) else None
        )

    @property
    def K(self) -> NDArray[np.float64]:
        return np.array([[self.f, 0.0, self.c[0]], [0.0, self.fy, self.c[1]], [0.0, 0.0, 1.0]])

    def resized(self, size: tuple[int, int]) -> Camera:
        """The same camera with its sensor scaled to ``size`` (intrinsics scale with it)."""
        kw: dict[str, Any] = {"roll_deg": self.roll_deg, "mirror": self.mirror, "dist": self.dist}
        if self._explicit:
            sx, sy = size[0] / self.size[0], size[1] / self.size[1]
            kw.update(
                fx=self.f * sx,
                fy=self.fy * sy,
                cx=(self.c[0] + 0.5) * sx - 0.5,
                cy=(self.c[1] + 0.5) * sy - 0.5,
            )
        return Camera(
            self.name,
            tuple(self.pos),
            tuple(self.look_at),
            size,
            self.fov_h_deg,
            **kw,  # type: ignore[arg-type]
        )

    def pinhole(self, scale: float = 1.0) -> Camera:
        """The same pose and principal point without distortion, focal lengths times ``scale``
        (< 1 widens the view: the static layer is drawn through it and then remapped)."""
        return Camera(
            self.name,
            tuple(self.pos),  # type: ignore[arg-type]
            tuple(self.look_at),  # type: ignore[arg-type]
            self.size,
            self.fov_h_deg,
            fx=self.f * scale,
            fy=self.fy * scale,
            cx=float(self.c[0]),
            cy=float(self.c[1]),
            roll_deg=self.roll_deg,
            mirror=self.mirror,
        )

    def project(self, pts: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """World points (N, 3) -> pixels (N, 2) and depths (N,)."""
        pc = np.asarray(pts, dtype=np.float64).reshape(-1, 3) @ self.R.T + self.t
        depth = pc[:, 2]
        if not self._explicit and self.dist is None:
            with np.errstate(divide="ignore", invalid="ignore"):
                uv = self.f * pc[:, :2] / depth[:, None] + self.c
            return uv, depth
        with np.errstate(divide="ignore", invalid="ignore"):
            xy = pc[:, :2] / depth[:, None]
        if self.dist is not None:
            xy = _distort(xy, self.dist)
        return xy * [self.f, self.fy] + self.c, depth


def _distort(xy: NDArray[np.float64], dist: tuple[float, ...]) -> NDArray[np.float64]:
    """Brown-Conrady on normalized coordinates (OpenCV's k1, k2, p1, p2, k3). Far outside the
    view the polynomial folds back; radii are clamped where it stops growing."""
    k1, k2, p1, p2, k3 = dist
    x, y = xy[:, 0], xy[:, 1]
    r2 = x * x + y * y
    lim = _fold_r2(k1, k2, k3)
    if lim is not None:
        s = np.sqrt(np.minimum(1.0, lim / np.maximum(r2, 1e-12)))
        x, y, r2 = x * s, y * s, np.minimum(r2, lim)
    radial = 1.0 + r2 * (k1 + r2 * (k2 + r2 * k3))
    xd = x * radial + 2.0 * p1 * x * y + p2 * (r2 + 2.0 * x * x)
    yd = y * radial + p1 * (r2 + 2.0 * y * y) + 2.0 * p2 * x * y
    return np.column_stack([xd, yd])


@functools.lru_cache(maxsize=32)
def _fold_r2(k1: float, k2: float, k3: float) -> float | None:
    """Squared radius where r * (1 + k1 r^2 + k2 r^4 + k3 r^6) stops growing (None: never)."""
    r2 = np.linspace(1e-4, 4.0, 4000)
    d = 1.0 + 3.0 * k1 * r2 + 5.0 * k2 * r2**2 + 7.0 * k3 * r2**3
    bad = np.nonzero(d <= 0)[0]
    return float(r2[bad[0]]) if len(bad) else None


TOP_CAMERA = Camera("top", (0.0, 0.86, -0.06), (0.0, 0.0, 0.23), (1920, 1080), 53.0)
SIDE_CAMERA = Camera("side", (0.62, 0.30, 0.70), (-0.02, 0.07, 0.20), (1280, 720), 58.0)


def camera_of(name: str, optics: CameraOptics, size: tuple[int, int] | None = None) -> Camera:
    """The camera a profile describes (``mecharm.sim.optics``), its sensor scaled to ``size``."""
    explicit = optics.fx is not None
    cam = Camera(
        name,
        optics.pos,
        optics.look_at,
        optics.size,
        optics.fov_h_deg,
        fx=optics.fx if explicit else None,
        fy=optics.fy if explicit else None,
        cx=optics.cx if explicit else None,
        cy=optics.cy if explicit else None,
        dist=optics.dist,
        roll_deg=optics.roll_deg,
        mirror=optics.mirror,
    )
    return cam if size is None or tuple(size) == cam.size else cam.resized(size)


@dataclass(frozen=True)
class SceneSnapshot:
    """What one frame shows, copied out of the scene under its lock."""

    version: int  # unique across all scenes of the process: keys the static-layer cache
    block_xyz: tuple[float, float, float]
    block_yaw_deg: float
    box: tuple[float, float, float]  # x, z, yaw: where the box is now (pushed boxes move)
    grasped: bool
    resting_on: str
    gain: float
    gradient: tuple[float, float]
    noise_sigma: float
    flicker: float
    block_rot: tuple[float, ...] | None = None  # row-major 3x3 (Unity frame); None: upright at yaw

    @classmethod
    def of(cls, scene: SceneState) -> SceneSnapshot:
        with scene.lock:
            lt = scene.layout.lighting
            return cls(
                version=scene.version,
                block_xyz=tuple(scene.block_xyz),  # type: ignore[arg-type]
                block_yaw_deg=scene.block_yaw_deg,
                box=scene.box,
                grasped=scene.grasped,
                resting_on=scene.resting_on,
                gain=lt.gain,
                gradient=lt.gradient,
                noise_sigma=lt.noise_sigma,
                flicker=lt.flicker,
                block_rot=tuple(scene.block_rot),
            )


# ---------------------------------------------------------------- geometry
def _rot_xz(yaw_deg: float) -> NDArray[np.float64]:
    a = math.radians(yaw_deg)
    return np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])


def _square(cx: float, cz: float, half: float, yaw_deg: float, y: float) -> NDArray[np.float64]:
    local = np.array([[half, half], [-half, half], [-half, -half], [half, -half]])
    xz = local @ _rot_xz(yaw_deg).T + [cx, cz]
    return np.column_stack([xz[:, 0], np.full(4, y), xz[:, 1]])


def _shade(normal: NDArray[np.float64], ambient: float = 0.35) -> float:
    return ambient + (1.0 - ambient) * max(0.0, float(normal @ _LIGHT))


Face = tuple[
    NDArray[np.float64], NDArray[np.float64], tuple[int, int, int], float
]  # pts, normal, bgr, factor


#: the cube's six faces: (outward axis index, sign); corners built from the other two axes
_CUBE_AXES = ((1, 1.0), (0, 1.0), (2, 1.0), (0, -1.0), (2, -1.0), (1, -1.0))


def _cube_faces(
    centre: tuple[float, float, float],
    yaw_deg: float,
    size: float,
    rot: tuple[float, ...] | None = None,
) -> list[Face]:
    """The faces of a cube of side ``size`` at ``centre``, upright at ``yaw_deg`` or turned by
    ``rot`` (row-major 3x3, Unity frame: a tipped block). Faces turned away from a camera are
    culled by the renderer, so drawing all six costs nothing for an upright block's bottom."""
    if rot is None:
        a = math.radians(yaw_deg)
        c, s = math.cos(a), math.sin(a)
        R = np.array([[c, 0.0, -s], [0.0, 1.0, 0.0], [s, 0.0, c]])
    else:
        R = np.asarray(rot, dtype=np.float64).reshape(3, 3)
    h = size / 2
    ctr = np.asarray(centre, dtype=np.float64)
    faces: list[Face] = []
    for k, sgn in _CUBE_AXES:
        i, j = [m for m in range(3) if m != k]
        n = R[:, k] * sgn
        ui, uj = R[:, i] * h, R[:, j] * h
        mid = ctr + n * h
        quad = np.array([mid + ui + uj, mid - ui + uj, mid - ui - uj, mid + ui - uj])
        faces.append((quad, n, BLOCK_BGR, 1.0))
    return faces


def _box_faces(bx: float, bz: float, yaw: float) -> tuple[list[Face], list[Face], list[Face]]:
    """(floor + inner walls, outer walls, rim) of the open box."""
    a, b = BOX_OUTER_M / 2, BOX_INNER_M / 2
    o_top, o_bot = _square(bx, bz, a, yaw, BOX_HEIGHT_M), _square(bx, bz, a, yaw, 0.0)
    i_top, i_bot = _square(bx, bz, b, yaw, BOX_HEIGHT_M), _square(bx, bz, b, yaw, BOX_FLOOR_M)
    up = np.array([0.0, 1.0, 0.0])
    inside: list[Face] = [(i_bot, up, BOX_BGR, 0.62)]
    outer: list[Face] = []
    rim: list[Face] = []
    for i in range(4):
        j = (i + 1) % 4
        mid = (o_top[i] + o_top[j]) / 2 - [bx, BOX_HEIGHT_M, bz]
        n = np.array([mid[0], 0.0, mid[2]])
        n /= np.linalg.norm(n)
        inside.append((np.array([i_top[i], i_top[j], i_bot[j], i_bot[i]]), -n, BOX_BGR, 0.85))
        outer.append((np.array([o_top[i], o_top[j], o_bot[j], o_bot[i]]), n, BOX_BGR, 1.0))
        rim.append((np.array([o_top[i], o_top[j], i_top[j], i_top[i]]), up, BOX_BGR, 1.0))
    return inside, outer, rim


# ---------------------------------------------------------------- renderer
class Renderer:
    """Renders one camera. Not thread-safe: one renderer per producing thread."""

    def __init__(
        self,
        camera: Camera,
        seed: int = 0,
        noise_patterns: int = 64,
        world: WorldArm | None = None,
        *,
        optics: CameraOptics | None = None,
        shadow: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        moving: Callable[[], bool] | None = None,
    ) -> None:
        self.cam = camera
        self.world = world or WorldArm()  # draws the arm where it really is
        # image effects of the profile (docs/simulation-optics.md); None: the ideal camera
        self.optics = optics
        self.shadow = float(shadow)
        self.clock = clock
        self.moving = moving  # is the arm moving now (None: judge by the poses alone)
        self._last_pose: tuple[float, tuple[float, ...]] | None = None
        # a distorting lens: the static layer is drawn by a pinhole renderer of the same pose
        # with a wider view, then remapped through maps kept on disk (mecharm/sim/lensmaps.py)
        self._flat: Renderer | None = None
        self._maps: tuple[NDArray[Any], NDArray[Any]] | None = None
        if camera.dist is not None:
            k = (camera.f, camera.fy, float(camera.c[0]), float(camera.c[1]))
            scale, m1, m2 = distortion_maps(camera.size, k, camera.dist)
            self._flat = Renderer(camera.pinhole(scale), world=self.world)
            self._maps = (m1, m2)
        self.rng = random.Random(seed)
        self._static_key: Any = None
        self._static: NDArray[np.uint8] | None = None
        # a still arm's frame before the sensor's noise: the same scene, pose, jaws and joint
        # play draw the same pixels, so from the second such frame on the next ones start from
        # a copy of it (docs/simulation-optics.md)
        self._last_key: Any = None
        self._still_key: Any = None
        self._still: NDArray[np.uint8] | None = None
        self._bg: NDArray[np.uint8] | None = None
        self._noise_key: float | None = None
        self._noise: tuple[NDArray[np.uint8], NDArray[np.uint8]] | None = None
        self._noise_rows = noise_patterns
        w, h = camera.size
        self._grid_u = (np.arange(w, dtype=np.float32) / max(1, w - 1) * 2 - 1)[None, :]
        self._grid_v = (np.arange(h, dtype=np.float32) / max(1, h - 1) * 2 - 1)[:, None]
        self._vignette: NDArray[np.float32] | None = None
        if optics is not None and optics.vignetting > 0:
            r2 = (self._grid_u**2 * w * w + self._grid_v**2 * h * h) / float(w * w + h * h)
            self._vignette = (1.0 - optics.vignetting * r2).astype(np.float32)

    # -------------------------------------------------------- primitives
    def _visible(self, pts: NDArray[np.float64], normal: NDArray[np.float64]) -> bool:
        return float(normal @ (self.cam.pos - pts.mean(axis=0))) > 0

    def _poly(
        self, img: NDArray[np.uint8], pts: NDArray[np.float64], bgr: tuple[float, ...]
    ) -> None:
        uv, depth = self.cam.project(pts)
        if np.any(depth <= 0.02):
            return
        cv2.fillPoly(img, [np.round(uv * _SCALE).astype(np.int32)], bgr, cv2.LINE_AA, _SHIFT)

    def _faces(self, img: NDArray[np.uint8], faces: list[Face], gain: float) -> None:
        vis = [f for f in faces if self._visible(f[0], f[1])]
        vis.sort(key=lambda f: -float(np.linalg.norm(f[0].mean(axis=0) - self.cam.pos)))
        for pts, n, bgr, factor in vis:
            s = _shade(n) * factor * gain
            self._poly(img, pts, tuple(min(255.0, c * s) for c in bgr))

    def _line(
        self,
        img: NDArray[np.uint8],
        p: NDArray[np.float64],
        q: NDArray[np.float64],
        width_m: float,
        bgr: tuple[float, ...],
    ) -> None:
        uv, depth = self.cam.project(np.array([p, q]))
        if np.any(depth <= 0.02):
            return
        px = max(1, round(width_m * self.cam.f / float(depth.mean())))
        a, b = np.round(uv * _SCALE).astype(np.int64)
        cv2.line(img, (int(a[0]), int(a[1])), (int(b[0]), int(b[1])), bgr, px, cv2.LINE_AA, _SHIFT)

    # -------------------------------------------------------- static layer
    def _background(self) -> NDArray[np.uint8]:
        w, h = self.cam.size
        img = np.empty((h, w, 3), np.uint8)
        img[:] = WALL_BGR if self.cam.name == "side" else TABLE_BGR
        table = np.array([[-0.9, 0, -0.25], [0.9, 0, -0.25], [0.9, 0, 0.8], [-0.9, 0, 0.8]])
        self._clipped_quad(img, table, TABLE_BGR)
        mat = np.array(
            [
                [MAT_X[0], 0, MAT_Z[0]],
                [MAT_X[1], 0, MAT_Z[0]],
                [MAT_X[1], 0, MAT_Z[1]],
                [MAT_X[0], 0, MAT_Z[1]],
            ]
        )
        self._poly(img, mat, MAT_BGR)
        for mid, corners in MARKERS.items():
            self._marker(img, mid, corners)
        return img

    def _clipped_quad(
        self, img: NDArray[np.uint8], quad: NDArray[np.float64], bgr: tuple[int, ...]
    ) -> None:
        """A large ground quad, cut to the part in front of the camera (the side camera sees the horizon)."""
        pc = quad @ self.cam.R.T + self.cam.t
        near = 0.05
        out = []
        for i in range(len(pc)):
            p, q = pc[i], pc[(i + 1) % len(pc)]
            if p[2] >= near:
                out.append(p)
            if (p[2] >= near) != (q[2] >= near):
                out.append(p + (q - p) * (near - p[2]) / (q[2] - p[2]))
        if len(out) < 3:
            return
        pts = np.array(out)
        uv = np.array([self.cam.f, self.cam.fy]) * pts[:, :2] / pts[:, 2:3] + self.cam.c
        cv2.fillPoly(img, [np.round(uv * _SCALE).astype(np.int32)], bgr, cv2.LINE_AA, _SHIFT)

    def _marker(
        self, img: NDArray[np.uint8], mid: int, corners: tuple[tuple[float, float], ...]
    ) -> None:
        c = np.array(corners)
        if self.cam.mirror:  # a real camera: the mat's markers are printed to read right in it
            c = c[[3, 2, 1, 0]]
        centre = c.mean(axis=0)
        paper = centre + (c - centre) * 1.4
        self._poly(img, np.column_stack([paper[:, 0], np.zeros(4), paper[:, 1]]), (245, 245, 245))
        uv, depth = self.cam.project(np.column_stack([c[:, 0], np.zeros(4), c[:, 1]]))
        if np.any(depth <= 0):
            return
        x0, y0 = np.floor(uv.min(axis=0)).astype(int) - 2
        x1, y1 = np.ceil(uv.max(axis=0)).astype(int) + 2
        h, w = img.shape[:2]
        if x0 < 0 or y0 < 0 or x1 > w or y1 > h:
            return
        side = 240
        tag = cv2.aruco.generateImageMarker(
            cv2.aruco.getPredefinedDictionary(cv2.aruco.DICT_4X4_50), mid, side
        )
        src = np.array([[0, 0], [side, 0], [side, side], [0, side]], np.float32) - 0.5
        M = cv2.getPerspectiveTransform(src, (uv - [x0, y0]).astype(np.float32))
        roi = img[y0:y1, x0:x1]
        warped = cv2.warpPerspective(
            cv2.cvtColor(tag, cv2.COLOR_GRAY2BGR), M, (x1 - x0, y1 - y0), flags=cv2.INTER_AREA
        )
        mask = cv2.warpPerspective(np.full((side, side), 255, np.uint8), M, (x1 - x0, y1 - y0))
        roi[mask > 127] = np.maximum(warped[mask > 127], 25)

    def _static_layer(self, s: SceneSnapshot) -> NDArray[np.uint8]:
        key = s.version
        if self._static is not None and key == self._static_key:
            return self._static
        flat = self._flat or self  # the pinhole view the scene is drawn in
        if self._bg is None:  # table, mat and markers never move: drawn once per renderer
            self._bg = flat._background()
        img = self._bg.copy()
        if self.shadow > 0:
            flat._static_shadows(img, s, self.shadow)
        flat._objects(img, s, include_block=not s.grasped, gain=1.0)
        if self._maps is not None:
            img = np.asarray(
                cv2.remap(img, *self._maps, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE),
                np.uint8,
            )
        if self.optics is not None and self.optics.defocus_px > 0:
            img = np.asarray(cv2.GaussianBlur(img, (0, 0), self.optics.defocus_px), np.uint8)
        gmap = (1.0 + s.gradient[0] * self._grid_u + s.gradient[1] * self._grid_v) * (
            s.gain * 128.0
        )
        if self._vignette is not None:
            gmap = gmap * self._vignette
        g8 = np.clip(gmap, 0, 255).astype(np.uint8)
        lit: NDArray[np.uint8] = np.asarray(
            cv2.multiply(img, cv2.merge([g8, g8, g8]), scale=1.0 / 128.0), np.uint8
        )
        self._static, self._static_key = lit, key
        return lit

    def _objects(
        self, img: NDArray[np.uint8], s: SceneSnapshot, include_block: bool, gain: float
    ) -> None:
        inside, outer, rim = _box_faces(*s.box)
        block = (
            _cube_faces(s.block_xyz, s.block_yaw_deg, BLOCK_SIZE_M, s.block_rot)
            if include_block
            else []
        )
        box_d = float(
            np.linalg.norm(np.array([s.box[0], BOX_HEIGHT_M / 2, s.box[1]]) - self.cam.pos)
        )
        blk_d = float(np.linalg.norm(np.array(s.block_xyz) - self.cam.pos))
        # inside the box by where it is, not by what it rests on: a block falling or tipping
        # into the box (contact engine mujoco) is drawn between its floor and its walls
        a = math.radians(s.box[2])
        dx, dz = s.block_xyz[0] - s.box[0], s.block_xyz[2] - s.box[1]
        lx, lz = math.cos(a) * dx + math.sin(a) * dz, -math.sin(a) * dx + math.cos(a) * dz
        in_box = max(abs(lx), abs(lz)) < BOX_INNER_M / 2 and s.block_xyz[1] < BOX_HEIGHT_M
        if not block:
            groups = [inside, outer, rim]
        elif s.resting_on == "box" or in_box:
            groups = [inside, block, outer, rim]
        elif s.resting_on == "rim" or blk_d <= box_d or s.block_xyz[1] > BOX_HEIGHT_M:
            groups = [inside, outer, rim, block]
        else:
            groups = [block, inside, outer, rim]
        for g in groups:
            self._faces(img, g, gain)

    # -------------------------------------------------------- dynamic layer
    def _arm(
        self,
        img: NDArray[np.uint8],
        angles: tuple[float, ...],
        gripper: float,
        s: SceneSnapshot,
        held_block_xyz: tuple[float, float, float] | None,
    ) -> None:
        pts = self.world.frames(angles)
        g = s.gain
        items: list[tuple[float, Any]] = []
        link = tuple(c * g for c in LINK_BGR)
        dark = tuple(c * g for c in GRIPPER_BGR)
        for i in range(6):
            p, q = pts[i], pts[i + 1]
            if np.linalg.norm(q - p) < 1e-6:
                continue
            d = float(np.linalg.norm((p + q) / 2 - self.cam.pos))
            items.append((d, ("line", p, q, _LINK_WIDTH_M[i], link)))
        flange, tip = pts[6], pts[7]
        axis = (tip - flange) / max(1e-9, float(np.linalg.norm(tip - flange)))
        perp = np.cross(axis, [0.0, 1.0, 0.0])
        if np.linalg.norm(perp) < 1e-3:
            perp = np.cross(axis, [1.0, 0.0, 0.0])
        perp /= np.linalg.norm(perp)
        palm = tip - axis * 0.035
        items.append(
            (
                float(np.linalg.norm((flange + palm) / 2 - self.cam.pos)),
                ("line", flange, palm, 0.026, dark),
            )
        )
        half = JAW_MAX_MM * max(0.0, min(100.0, gripper)) / 100.0 / 2000.0 + 0.003
        for sgn in (-1.0, 1.0):
            a, b = palm + sgn * perp * half, tip + sgn * perp * half
            items.append(
                (float(np.linalg.norm((a + b) / 2 - self.cam.pos)), ("line", a, b, 0.007, dark))
            )
        bar = ("line", palm - perp * (half + 0.004), palm + perp * (half + 0.004), 0.010, dark)
        items.append((float(np.linalg.norm(palm - self.cam.pos)), bar))
        if held_block_xyz is not None:
            items.append(
                (
                    float(np.linalg.norm(np.array(held_block_xyz) - self.cam.pos)),
                    ("block", held_block_xyz),
                )
            )
        items.sort(key=lambda it: -it[0])
        for _, item in items:
            if item[0] == "line":
                self._line(img, item[1], item[2], item[3], item[4])
            else:
                self._faces(
                    img, _cube_faces(item[1], s.block_yaw_deg, BLOCK_SIZE_M, s.block_rot), g
                )
        uv, depth = self.cam.project(tip[None, :])
        if depth[0] > 0.02:
            r = max(2, round(TIP_MARKER_RADIUS_M * self.cam.f / float(depth[0]) * _SCALE))
            c = np.round(uv[0] * _SCALE).astype(int)
            cv2.circle(
                img,
                (int(c[0]), int(c[1])),
                r,
                tuple(min(255.0, c_ * g) for c_ in MARKER_BGR),
                -1,
                cv2.LINE_AA,
                _SHIFT,
            )

    def _sensor(self, img: NDArray[np.uint8], s: SceneSnapshot) -> NDArray[np.uint8]:
        if s.flicker > 0:
            img = np.asarray(
                cv2.convertScaleAbs(img, alpha=1.0 + self.rng.uniform(-s.flicker, s.flicker)),
                np.uint8,
            )
        sigma = s.noise_sigma
        if self.optics is not None:  # the profile's sensor, noisier in the dark (auto gain)
            dark = round(max(1.0, 1.0 / s.gain) ** 2 * 4.0) / 4.0  # few levels: patterns reused
            sigma *= self.optics.noise_scale * dark
        # a real sensor is never noiseless: without this floor a still scene with no noise and
        # little flicker repeats its JPEG byte for byte, which is what a frozen feed looks like
        sigma = max(sigma, SENSOR_NOISE_FLOOR)
        if sigma > 0:
            if self._noise is None or self._noise_key != sigma:
                # two rectified gaussians (cv2.randn saturates negatives to 0 in uint8): their
                # difference is zero-mean noise of about sigma; drawn once, cycled by row offset
                h, w = img.shape[:2]
                cv2.setRNGSeed(self.rng.randrange(1 << 30))
                pos = np.empty((h + self._noise_rows, w, 3), np.uint8)
                neg = np.empty_like(pos)
                sd = sigma * 1.2
                cv2.randn(pos, np.zeros(3), np.full(3, sd))
                cv2.randn(neg, np.zeros(3), np.full(3, sd))
                self._noise = (pos, neg)
                self._noise_key = sigma
            h = img.shape[0]
            o1, o2 = self.rng.randrange(self._noise_rows), self.rng.randrange(self._noise_rows)
            cv2.add(img, self._noise[0][o1 : o1 + h], dst=img)
            cv2.subtract(img, self._noise[1][o2 : o2 + h], dst=img)
        return img

    # -------------------------------------------------------- public
    def render(
        self, snapshot: SceneSnapshot, angles: tuple[float, ...], gripper: float
    ) -> NDArray[np.uint8]:
        """One BGR frame of the scene with the arm at ``angles`` (degrees), gripper 0..100 (a held
        block is drawn where the snapshot says, in depth order with the gripper)."""
        pose = tuple(float(a) for a in angles)
        poses = self._exposure_poses(pose)
        # everything but the sensor is a function of these when the exposure saw one pose (the
        # side each joint last moved to sets where its play puts the link)
        key = None
        if len(poses) == 1:
            key = (snapshot, pose, float(gripper), self.world.sides)
        if key is not None and key == self._still_key and self._still is not None:
            return self._sensor(self._still.copy(), snapshot)
        self._still_key = self._still = None  # another frame: a later still one starts afresh
        img = self._static_layer(snapshot).copy()
        held = None
        if snapshot.grasped:
            held = tuple(float(v) for v in snapshot.block_xyz)
        if self.shadow > 0:
            self._arm_shadow(img, angles, held, self.shadow)  # type: ignore[arg-type]
        if len(poses) == 1:
            self._arm(img, angles, gripper, snapshot, held)  # type: ignore[arg-type]
        else:  # motion blur: the arm smeared over the poses it passed during the exposure
            self._blurred_arm(img, poses, gripper, snapshot, held)  # type: ignore[arg-type]
        if key is not None and key == self._last_key:  # still: keep it (a moving arm's never is)
            self._still_key, self._still = key, img.copy()
        self._last_key = key
        return self._sensor(img, snapshot)

    # -------------------------------------------------------- profile effects
    def _exposure_poses(self, angles: tuple[float, ...]) -> list[tuple[float, ...]]:
        """The poses the arm passed during this frame's exposure, interpolated from the last
        frame's (one pose when the arm is still or blur is off)."""
        if self.optics is None or self.optics.exposure_ms <= 0:
            return [angles]
        now = self.clock()
        last, self._last_pose = self._last_pose, (now, angles)
        if (
            last is None
            or not 0.0 < now - last[0] <= _BLUR_MAX_GAP_S
            or len(last[1]) != len(angles)
            or (self.moving is not None and not self.moving())
        ):
            return [angles]  # no recent frame to tell the path by, or the arm stands still
        frac = min(1.0, self.optics.exposure_ms / 1000.0 / (now - last[0]))
        start = [a + (b - a) * frac for a, b in zip(angles, last[1], strict=True)]
        moved = max(abs(a - b) for a, b in zip(angles, start, strict=True))
        if moved < _BLUR_MIN_DEG:
            return [angles]
        n = min(4, 2 + int(moved / _BLUR_MIN_DEG))
        return [
            tuple(a + (b - a) * k / (n - 1) for a, b in zip(angles, start, strict=True))
            for k in range(n)
        ]

    def _arm_box(
        self, poses: list[tuple[float, ...]], held: tuple[float, float, float] | None
    ) -> tuple[int, int, int, int] | None:
        """(x0, y0, x1, y1) in the image that holds the arm (and a held block) in every pose."""
        pts = [np.asarray(self.world.frames(q), dtype=np.float64) for q in poses]
        if held is not None:
            pts.append(np.array([held]))
        return self._pixel_box(np.vstack(pts), 0.09)

    def _pixel_box(
        self, pts: NDArray[np.float64], margin_m: float
    ) -> tuple[int, int, int, int] | None:
        uv, depth = self.cam.project(pts)
        if not (np.all(depth > 0.02) and np.all(np.isfinite(uv))):
            return None
        m = margin_m * max(self.cam.f, self.cam.fy) / float(depth.min())
        w, h = self.cam.size
        x0, y0 = (max(0, int(v)) for v in np.floor(uv.min(axis=0) - m))
        x1, y1 = min(w, int(np.ceil(uv[:, 0].max() + m))), min(h, int(np.ceil(uv[:, 1].max() + m)))
        return (x0, y0, x1, y1) if x1 > x0 and y1 > y0 else None

    def _blurred_arm(
        self,
        img: NDArray[np.uint8],
        poses: list[tuple[float, ...]],
        gripper: float,
        s: SceneSnapshot,
        held: tuple[float, float, float] | None,
    ) -> None:
        """The arm averaged over ``poses``, computed inside the box that holds all of them."""
        box = self._arm_box(poses, held)
        if box is None:
            self._arm(img, poses[0], gripper, s, held)
            return
        x0, y0, x1, y1 = box
        base = img[y0:y1, x0:x1].copy()
        scratch = img.copy()
        acc = np.zeros(base.shape, np.float32)
        for q in poses:
            scratch[y0:y1, x0:x1] = base
            self._arm(scratch, q, gripper, s, held)
            cv2.accumulate(scratch[y0:y1, x0:x1], acc)
        img[y0:y1, x0:x1] = cv2.convertScaleAbs(acc, alpha=1.0 / len(poses))

    @staticmethod
    def _darken(
        img: NDArray[np.uint8], mask: NDArray[np.uint8], x0: int, y0: int, strength: float
    ) -> None:
        """img *= 1 - strength x mask/255 where ``mask`` (a window at x0, y0) lies."""
        h, w = mask.shape
        shade = cv2.convertScaleAbs(mask, alpha=-strength, beta=255.0)
        roi = img[y0 : y0 + h, x0 : x0 + w]
        img[y0 : y0 + h, x0 : x0 + w] = cv2.multiply(
            roi, cv2.cvtColor(shade, cv2.COLOR_GRAY2BGR), scale=1.0 / 255.0
        )

    def _shadow_mask(
        self,
        segments: list[tuple[NDArray[np.float64], NDArray[np.float64], float]],
        solids: list[NDArray[np.float64]],
        soft_px: float,
    ) -> tuple[NDArray[np.uint8], int, int] | None:
        """The shadows on the mat of thick segments (p, q, width m) and of convex solids (their
        corner points), soft-edged, as a window of the image: (mask, x0, y0)."""
        every = [np.array([p, q]) for p, q, _ in segments] + solids
        if not every:
            return None
        flat = _on_mat(np.vstack(every))
        box = self._pixel_box(flat, 0.05)
        if box is None:
            return None
        x0, y0, x1, y1 = box
        mask = np.zeros((y1 - y0, x1 - x0), np.uint8)
        off = np.array([x0, y0], dtype=np.float64)
        for p, q, width in segments:
            uv, depth = self.cam.project(_on_mat(np.array([p, q])))
            px = max(1, round(width * self.cam.f / float(depth.mean())))
            a, b = np.round((uv - off) * _SCALE).astype(np.int64)
            cv2.line(
                mask, (int(a[0]), int(a[1])), (int(b[0]), int(b[1])), 255, px, cv2.LINE_AA, _SHIFT
            )
        for pts in solids:
            uv, _ = self.cam.project(_on_mat(pts))
            hull = cv2.convexHull(np.round((uv - off) * _SCALE).astype(np.int32))
            cv2.fillConvexPoly(mask, hull, 255, cv2.LINE_AA, _SHIFT)
        k = 2 * round(soft_px) + 1  # a box filter: soft enough, a fraction of a Gaussian's cost
        return np.asarray(cv2.blur(mask, (k, k)), np.uint8), x0, y0

    def _static_shadows(self, img: NDArray[np.uint8], s: SceneSnapshot, strength: float) -> None:
        """The box's and a resting block's shadows on the mat (drawn before the objects)."""
        bx, bz, yaw = s.box
        a = BOX_OUTER_M / 2
        solids = [np.vstack([_square(bx, bz, a, yaw, 0.0), _square(bx, bz, a, yaw, BOX_HEIGHT_M)])]
        if not s.grasped:
            x, y, z = s.block_xyz
            h = BLOCK_SIZE_M / 2
            solids.append(
                np.vstack(
                    [
                        _square(x, z, h, s.block_yaw_deg, y - h),
                        _square(x, z, h, s.block_yaw_deg, y + h),
                    ]
                )
            )
        found = self._shadow_mask([], solids, 2.0)
        if found is not None:
            self._darken(img, found[0], found[1], found[2], strength)

    def _arm_shadow(
        self,
        img: NDArray[np.uint8],
        angles: tuple[float, ...],
        held: tuple[float, float, float] | None,
        strength: float,
    ) -> None:
        """The arm's (and a held block's) shadow on the mat, soft-edged."""
        pts = np.asarray(self.world.frames(angles), dtype=np.float64)
        widths = (*_LINK_WIDTH_M[:6], 0.026)
        segs = [
            (pts[i], pts[i + 1], widths[i])
            for i in range(min(len(pts) - 1, len(widths)))
            if np.linalg.norm(pts[i + 1] - pts[i]) > 1e-6
        ]
        solids = []
        if held is not None:
            x, y, z = held
            h = BLOCK_SIZE_M / 2
            solids.append(np.vstack([_square(x, z, h, 0.0, y - h), _square(x, z, h, 0.0, y + h)]))
        found = self._shadow_mask(segs, solids, 2.5)
        if found is not None:
            self._darken(img, found[0], found[1], found[2], strength)
