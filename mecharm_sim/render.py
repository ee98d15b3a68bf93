"""Pinhole rendering of the workcell for the simulated top and side cameras.

Flat-shaded polygons (painter's order, back faces culled) for the mat, the
ArUco corner markers, the box and the block; thick lines for the arm's links
from the FK chain; the gripper's fingers open with the actual gripper value; a
green ball marks the tool tip. Cost is kept low for a 2-core machine: the
static part (mat, markers, box, a block at rest, lighting) is rendered once per
scene change and cached; each frame copies it, draws the arm (and a held
block), then applies per-frame flicker and pre-generated sensor noise.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
from numpy.typing import NDArray

from mecharm_sim.scene import (
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
from mecharm_sim.world_arm import WorldArm

__all__ = [
    "SIDE_CAMERA",
    "TIP_MARKER_RADIUS_M",
    "TOP_CAMERA",
    "Camera",
    "Renderer",
    "SceneSnapshot",
]

TIP_MARKER_RADIUS_M = 0.007
JAW_MAX_MM = 55.0  # jaw opening at gripper value 100
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


class Camera:
    """Pinhole camera (square pixels, principal point at the image centre) in the Unity frame."""

    def __init__(
        self,
        name: str,
        pos: tuple[float, float, float],
        look_at: tuple[float, float, float],
        size: tuple[int, int],
        fov_h_deg: float,
    ) -> None:
        self.name = name
        self.pos = np.asarray(pos, dtype=np.float64)
        self.look_at = np.asarray(look_at, dtype=np.float64)
        self.size = (int(size[0]), int(size[1]))
        self.fov_h_deg = float(fov_h_deg)
        fwd = self.look_at - self.pos
        fwd /= np.linalg.norm(fwd)
        right = np.cross(fwd, [0.0, 1.0, 0.0])
        right /= np.linalg.norm(right)
        down = np.cross(fwd, right)
        self.R = np.stack([right, down, fwd])
        self.t = -self.R @ self.pos
        w, h = self.size
        self.f = (w / 2.0) / math.tan(math.radians(fov_h_deg) / 2.0)
        self.c = np.array([(w - 1) / 2.0, (h - 1) / 2.0])

    def resized(self, size: tuple[int, int]) -> Camera:
        return Camera(self.name, tuple(self.pos), tuple(self.look_at), size, self.fov_h_deg)  # type: ignore[arg-type]

    def project(self, pts: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """World points (N, 3) -> pixels (N, 2) and depths (N,)."""
        pc = np.asarray(pts, dtype=np.float64).reshape(-1, 3) @ self.R.T + self.t
        depth = pc[:, 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            uv = self.f * pc[:, :2] / depth[:, None] + self.c
        return uv, depth


TOP_CAMERA = Camera("top", (0.0, 0.86, -0.06), (0.0, 0.0, 0.23), (1920, 1080), 53.0)
SIDE_CAMERA = Camera("side", (0.62, 0.30, 0.70), (-0.02, 0.07, 0.20), (1280, 720), 58.0)


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
    ) -> None:
        self.cam = camera
        self.world = world or WorldArm()  # draws the arm where it really is
        self.rng = random.Random(seed)
        self._static_key: Any = None
        self._static: NDArray[np.uint8] | None = None
        self._bg: NDArray[np.uint8] | None = None
        self._noise_key: float | None = None
        self._noise: tuple[NDArray[np.uint8], NDArray[np.uint8]] | None = None
        self._noise_rows = noise_patterns
        w, h = camera.size
        self._grid_u = (np.arange(w, dtype=np.float32) / max(1, w - 1) * 2 - 1)[None, :]
        self._grid_v = (np.arange(h, dtype=np.float32) / max(1, h - 1) * 2 - 1)[:, None]

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
        uv = self.cam.f * pts[:, :2] / pts[:, 2:3] + self.cam.c
        cv2.fillPoly(img, [np.round(uv * _SCALE).astype(np.int32)], bgr, cv2.LINE_AA, _SHIFT)

    def _marker(
        self, img: NDArray[np.uint8], mid: int, corners: tuple[tuple[float, float], ...]
    ) -> None:
        c = np.array(corners)
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
        if self._bg is None:  # table, mat and markers never move: drawn once per renderer
            self._bg = self._background()
        img = self._bg.copy()
        self._objects(img, s, include_block=not s.grasped, gain=1.0)
        gmap = (1.0 + s.gradient[0] * self._grid_u + s.gradient[1] * self._grid_v) * (
            s.gain * 128.0
        )
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
        if s.noise_sigma > 0:
            if self._noise is None or self._noise_key != s.noise_sigma:
                # two rectified gaussians (cv2.randn saturates negatives to 0 in uint8): their
                # difference is zero-mean noise of about sigma; drawn once, cycled by row offset
                h, w = img.shape[:2]
                cv2.setRNGSeed(self.rng.randrange(1 << 30))
                pos = np.empty((h + self._noise_rows, w, 3), np.uint8)
                neg = np.empty_like(pos)
                sd = s.noise_sigma * 1.2
                cv2.randn(pos, np.zeros(3), np.full(3, sd))
                cv2.randn(neg, np.zeros(3), np.full(3, sd))
                self._noise = (pos, neg)
                self._noise_key = s.noise_sigma
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
        img = self._static_layer(snapshot).copy()
        held = None
        if snapshot.grasped:
            held = tuple(float(v) for v in snapshot.block_xyz)
        self._arm(img, angles, gripper, snapshot, held)  # type: ignore[arg-type]
        return self._sensor(img, snapshot)
