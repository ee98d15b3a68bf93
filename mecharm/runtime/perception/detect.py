"""Red block and white box on the mat from top-camera frames (docs/perception.md: detect, servo_place).

Pure functions over BGR numpy frames; no camera I/O. Each object is measured
on the plane where its visible top lies (block top face at 25 mm, box rim at
43 mm) so perspective does not shift it:

* block: red by hue -> largest plausible blob -> its top face (the brightest
  part of the blob, Otsu on V, since the sides are in shade) -> centroid;
* box: white and unsaturated -> the rim's outer contour -> minimum-area
  rectangle in millimetres; when no contour passes the size/shape check,
  template matching of the rim over rotations 0-75° (step 15) and scales
  0.85/1.0/1.15 on a rectified view, scored by correlation x the ring's
  contrast; below the score threshold, the configured fallback position.

A box detection that doubts itself (the fallback, a template hit with nothing
white near it, samples that disagree) says so: ``trusted=False`` and ``doubt``
(docs/perception.md, "Detections that doubt themselves").

One concern: finding the block and the box in top-camera frames; the measurements share the
mat plane and the colour rules.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import cv2
import numpy as np
from numpy.typing import NDArray

from mecharm.runtime.perception.config import DEFAULT_CONFIG, PerceptionConfig
from mecharm.runtime.perception.homography import MatHomography, _check_frame
from mecharm.runtime.perception.results import BlockDetection, BoxDetection, SceneDetection

__all__ = [
    "BOX_FALLBACK_XZ",
    "BOX_MAX_SPREAD_MM",
    "BOX_SCORE_THRESH",
    "BOX_TEMPLATE_BLOB_MM",
    "TEMPLATE_ROTATIONS_DEG",
    "TEMPLATE_SCALES",
    "combine_detections",
    "detect_block",
    "detect_box",
    "detect_scene",
    "locate_block",
    "red_counts",
    "refind_box",
]

BOX_FALLBACK_XZ = (-0.01, 0.108)
BOX_SCORE_THRESH = 0.5
TEMPLATE_ROTATIONS_DEG = (0, 15, 30, 45, 60, 75)
TEMPLATE_SCALES = (0.85, 1.0, 1.15)
_TEMPLATE_MM_PER_PX = 1.0
_TEMPLATE_FULL_CONTRAST = 0.5  # white share on the ring minus around it, for a full score
#: a template hit farther than this from every white blob is not trusted (the rim itself lies
#: within 39 mm of the box's centre)
BOX_TEMPLATE_BLOB_MM = 45.0
#: box samples of one detect spread wider than this (mm): the box is not trusted
BOX_MAX_SPREAD_MM = 10.0
_KERNEL = np.ones((3, 3), np.uint8)
#: when the box is not found at white_v_min (dim light, a vignetting lens), it is searched again
#: with white = at least this share of the frame's brightest grey on the mat
_DIM_WHITE_SHARE = 0.78


# ---------------------------------------------------------------- masks
def _mat_roi(
    frame_shape: tuple[int, ...], H: MatHomography, config: PerceptionConfig
) -> tuple[NDArray[Any], tuple[int, int]]:
    """The mat's pixels, cropped to its bounding box, and the box's offset; cached on ``H``."""
    cache: dict[Any, tuple[NDArray[Any], tuple[int, int]]] = H.__dict__.setdefault("_roi_cache", {})
    key = (frame_shape[:2], config.mat_x, config.mat_z)
    if key not in cache:
        x0, x1 = config.mat_x
        z0, z1 = config.mat_z
        corners = np.array([[x0, z0], [x1, z0], [x1, z1], [x0, z1]])
        if H.distorted:  # the mat's edges bend under the lens: follow them
            s = np.linspace(0.0, 1.0, 16, endpoint=False)[:, None]
            corners = np.vstack(
                [
                    a + s * (b - a)
                    for a, b in zip(corners, np.roll(corners, -1, axis=0), strict=True)
                ]
            )
        poly = H.xzs_to_pixels(corners)
        mask = np.zeros(frame_shape[:2], np.uint8)
        if H.distorted:
            cv2.fillPoly(mask, [np.round(poly).astype(np.int32)], 255)
        else:
            cv2.fillConvexPoly(mask, np.round(poly).astype(np.int32), 255)
        bx, by, bw, bh = cv2.boundingRect(mask)
        if bw == 0 or bh == 0:  # the mat is not in this frame at all
            bx, by, bw, bh = 0, 0, 1, 1
        cache[key] = (mask[by : by + bh, bx : bx + bw].copy(), (bx, by))
    return cache[key]


class _View:
    """One frame prepared once for every detector: HSV of the mat's bounding box (or the
    whole frame), the mat mask, and the crop offset (contours come back in frame pixels)."""

    def __init__(
        self,
        frame: NDArray[np.uint8],
        H: MatHomography,
        config: PerceptionConfig,
        on_mat: bool = True,
    ) -> None:
        _check_frame(frame)
        self.config = config
        self.mask: NDArray[Any] | None = None
        self.off = (0, 0)
        roi = frame
        if on_mat:
            self.mask, self.off = _mat_roi(frame.shape, H, config)
            h, w = self.mask.shape
            roi = frame[self.off[1] : self.off[1] + h, self.off[0] : self.off[0] + w]
        self.hsv: NDArray[Any] = cv2.cvtColor(roi, cv2.COLOR_BGR2HSV)

    def _masked(self, m: NDArray[Any]) -> NDArray[Any]:
        return m if self.mask is None else cv2.bitwise_and(m, self.mask)

    def red(self) -> NDArray[Any]:
        s, v = self.config.red_s_min, self.config.red_v_min
        return self._masked(
            cv2.bitwise_or(
                cv2.inRange(self.hsv, (0, s, v), (10, 255, 255)),
                cv2.inRange(self.hsv, (170, s, v), (180, 255, 255)),
            )
        )

    def white(self, v_min: int | None = None) -> NDArray[Any]:
        c = self.config
        v = c.white_v_min if v_min is None else v_min
        return self._masked(cv2.inRange(self.hsv, (0, 0, v), (180, c.white_s_max, 255)))

    def dim_white_v(self) -> int:
        """A white threshold for this frame's light: a share of its brightest unsaturated
        pixels (the box's rim, the markers' paper) on the mat."""
        grey = self.hsv[..., 1] <= self.config.white_s_max
        if self.mask is not None:
            grey &= self.mask > 0
        vals = self.hsv[..., 2][grey]
        if vals.size < 100:
            return self.config.white_v_min
        return int(_DIM_WHITE_SHARE * float(np.percentile(vals, 99.9)))


def _poly_xz(contour: NDArray[Any], H: MatHomography, height: float) -> NDArray[np.float64]:
    return H.pixels_to_xz(contour.reshape(-1, 2).astype(np.float64), height)


# ---------------------------------------------------------------- block
def _block_from(
    view: _View,
    H: MatHomography,
    config: PerceptionConfig,
    height: float,
    near_xz: tuple[float, float] | None,
) -> BlockDetection | None:
    red = view.red()
    hsv = view.hsv
    ox, oy = view.off
    contours, _ = cv2.findContours(red, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE, offset=(ox, oy))
    face_mm2 = (config.block_size_m * 1000.0) ** 2
    best = None
    for c in contours:
        if cv2.contourArea(c) < 30:
            continue
        area = cv2.contourArea(_poly_xz(c, H, height).astype(np.float32)) * 1e6
        if not 0.3 * face_mm2 <= area <= 4.0 * face_mm2:
            continue
        if near_xz is not None:
            m = cv2.moments(c)
            if m["m00"] <= 0:
                continue
            cx, cz = H.pixel_to_xz(m["m10"] / m["m00"], m["m01"] / m["m00"], height)
            rank = -math.hypot(cx - near_xz[0], cz - near_xz[1])
        else:
            rank = area
        if best is None or rank > best[0]:
            best = (rank, c)
    if best is None:
        return None
    x, y, w, h = cv2.boundingRect(best[1])
    lx, ly = x - ox, y - oy  # in the view's crop
    outline = np.zeros((h, w), np.uint8)
    cv2.drawContours(outline, [best[1]], -1, 255, -1, offset=(-x, -y))
    blob: NDArray[Any] = cv2.bitwise_and(outline, red[ly : ly + h, lx : lx + w])
    vals = hsv[ly : ly + h, lx : lx + w, 2]
    inside = vals[blob > 0]
    if inside.size < 10:
        return None
    thr, _ = cv2.threshold(inside.reshape(-1, 1), 0, 255, cv2.THRESH_BINARY + cv2.THRESH_OTSU)
    hi, lo = inside[inside > thr], inside[inside <= thr]
    top: NDArray[Any] = blob.copy()
    if hi.size and lo.size and float(hi.mean()) - float(lo.mean()) > 25.0:
        top[vals <= thr] = 0
        top = cv2.morphologyEx(top, cv2.MORPH_OPEN, _KERNEL)
        n, labels, stats, _ = cv2.connectedComponentsWithStats(top)
        if n > 1:
            k = 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
            top = np.where(labels == k, 255, 0).astype(np.uint8)
    m = cv2.moments(top, binaryImage=True)
    if m["m00"] <= 0:
        return None
    u, v = x + m["m10"] / m["m00"], y + m["m01"] / m["m00"]
    bx, bz = H.pixel_to_xz(u, v, height)
    cts, _ = cv2.findContours(top, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
    face = max(cts, key=cv2.contourArea) + np.array([x, y])
    face_xz = (_poly_xz(face, H, height) * 1000.0).astype(np.float32)
    (_, _), (_, _), ang = cv2.minAreaRect(face_xz)
    return BlockDetection(
        x=bx,
        z=bz,
        yaw_deg=float(ang % 90.0),
        u=float(u),
        v=float(v),
        area_mm2=float(cv2.contourArea(face_xz)),
        height_m=height,
    )


def detect_block(
    frame: NDArray[np.uint8], H: MatHomography, config: PerceptionConfig = DEFAULT_CONFIG
) -> BlockDetection | None:
    """The red block standing on the mat, or None when no plausible red blob is seen."""
    return _block_from(_View(frame, H, config), H, config, config.block_size_m, None)


def locate_block(
    frame: NDArray[np.uint8],
    H: MatHomography,
    height_m: float | None = None,
    near_xz: tuple[float, float] | None = None,
    config: PerceptionConfig = DEFAULT_CONFIG,
) -> BlockDetection | None:
    """The block wherever it is (in the gripper during the place servo, servo_place).

    ``height_m`` is the height of its top face; default: standing on the mat.
    A grasped block keeps its offset to the tip, so while held its top is at
    ``tip ee_y + block_size - pick ee_y`` (the pick descend's ee_y); an error
    of e in the height shifts the result by about e x (distance from the
    camera's nadir) / (camera height), e.g. 10 mm -> ~3 mm at the box.
    ``near_xz`` prefers the red blob nearest that point. Searches the whole
    frame, not only the mat.
    """
    h = config.block_size_m if height_m is None else float(height_m)
    return _block_from(_View(frame, H, config, on_mat=False), H, config, h, near_xz)


# ---------------------------------------------------------------- box
def _box_contour(
    white: NDArray[Any],
    off: tuple[int, int],
    H: MatHomography,
    config: PerceptionConfig,
    blobs: list[NDArray[np.float32]] | None = None,
) -> tuple[BoxDetection | None, str]:
    """The best box-shaped white contour; every white blob's outline (mm, rim plane) goes to ``blobs``."""
    contours, _ = cv2.findContours(white, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE, offset=off)
    outer = config.box_outer_m * 1000.0
    best: BoxDetection | None = None
    n_big = 0
    for c in contours:
        a = cv2.contourArea(c)
        if a < 20:
            continue
        pts = (_poly_xz(c, H, config.box_height_m) * 1000.0).astype(np.float32)
        if blobs is not None:  # small ones too: a dim rim breaks into pieces
            blobs.append(pts)
        if a < 200:
            continue
        n_big += 1
        (cx, cz), (w, h), ang = cv2.minAreaRect(pts)
        if w <= 0 or h <= 0:
            continue
        size_err = max(abs(w / outer - 1.0), abs(h / outer - 1.0))
        fill = cv2.contourArea(pts) / (w * h)
        if size_err > 0.15 or fill < 0.85:
            continue
        score = max(0.0, 1.0 - 2.0 * size_err) * min(1.0, fill)
        if best is None or score > best.score:
            m = cv2.moments(c)
            best = BoxDetection(
                x=cx / 1000.0,
                z=cz / 1000.0,
                yaw_deg=float(ang % 90.0),
                score=float(score),
                method="contour",
                u=m["m10"] / m["m00"],
                v=m["m01"] / m["m00"],
                size_mm=(float(w), float(h)),
            )
    if best is None:
        return (
            None,
            f"no white contour of the box's size ({outer:.0f} mm square) among {n_big} white blobs",
        )
    return best, ""


def _ring_template(outer_px: float, inner_px: float, angle_deg: float, pad: int) -> NDArray[Any]:
    size = math.ceil(outer_px * math.sqrt(2)) + 2 * pad
    size += 1 - size % 2
    t = np.zeros((size, size), np.float32)
    c = (size - 1) / 2.0
    for side, val in ((outer_px, 1.0), (inner_px, 0.0)):
        box = cv2.boxPoints(((c, c), (side, side), angle_deg))
        cv2.fillConvexPoly(
            t, np.round(box * 16).astype(np.int32), val, lineType=cv2.LINE_AA, shift=4
        )
    return t


def _ring_mask(outer_px: float, inner_px: float, angle_deg: float, pad: int) -> NDArray[Any]:
    """The template's ring as a hard 0/1 mask (same window as ``_ring_template``)."""
    return (_ring_template(outer_px, inner_px, angle_deg, pad) > 0.5).astype(np.float32)


def _box_template(
    white: NDArray[Any], off: tuple[int, int], H: MatHomography, config: PerceptionConfig
) -> tuple[float, float, float, float, float]:
    """Best (score, x, z, yaw_deg, scale) of the rim template over the search window.

    The score is the normalized correlation times the ring's contrast: the share of
    white under the ring minus the share of white around it, scaled so a clean rim
    (contrast >= ``_TEMPLATE_FULL_CONTRAST``) keeps its correlation. Normalized
    correlation alone scores a nearly empty white mask (an empty mat in dim light)
    as high as a box, because it divides by that window's tiny variance.
    """
    res = _TEMPLATE_MM_PER_PX / 1000.0
    (x0, x1), (z0, z1) = config.box_search_x, config.box_search_z
    wpx, hpx = round((x1 - x0) / res), round((z1 - z0) / res)
    # rectified pixel (i, j) -> mat (x0 + i*res, z1 - j*res) on the rim's plane
    if H.distorted:  # through the lens: every rectified pixel looks up its raw pixel
        rect = cv2.remap(
            white,
            *_rect_maps(H, (x0, z1), res, (wpx, hpx), config.box_height_m, off),
            cv2.INTER_LINEAR,
        )
    else:
        S = np.array([[res, 0, x0], [0, -res, z1], [0, 0, 1.0]])
        T = np.array([[1.0, 0, -off[0]], [0, 1.0, -off[1]], [0, 0, 1.0]])  # frame -> crop pixels
        M = T @ H.plane(config.box_height_m) @ S
        rect = cv2.warpPerspective(
            white, M, (wpx, hpx), flags=cv2.WARP_INVERSE_MAP | cv2.INTER_LINEAR
        )
    rect = cv2.GaussianBlur(rect.astype(np.float32) / 255.0, (5, 5), 0)
    best = (-1.0, 0.0, 0.0, 0.0, 1.0)
    outer, inner = config.box_outer_m / res, config.box_inner_m / res
    for s in TEMPLATE_SCALES:
        for a in TEMPLATE_ROTATIONS_DEG:
            t = _ring_template(outer * s, inner * s, a, pad=6)
            if t.shape[0] >= rect.shape[0] or t.shape[1] >= rect.shape[1]:
                continue
            ring = _ring_mask(outer * s, inner * s, a, pad=6)
            n_ring = float(ring.sum())
            n_rest = float(ring.size) - n_ring
            t = cv2.GaussianBlur(t, (5, 5), 0)
            r = cv2.matchTemplate(rect, t, cv2.TM_CCOEFF_NORMED)
            on_ring = cv2.matchTemplate(rect, ring, cv2.TM_CCORR) / n_ring
            total = cv2.matchTemplate(rect, np.ones_like(ring), cv2.TM_CCORR)
            around = (total - on_ring * n_ring) / n_rest
            contrast = np.clip((on_ring - around) / _TEMPLATE_FULL_CONTRAST, 0.0, 1.0)
            combined = np.where(np.isfinite(r), r, -1.0) * contrast
            _, score, _, loc = cv2.minMaxLoc(combined)
            if np.isfinite(score) and score > best[0]:
                ci = loc[0] + (t.shape[1] - 1) / 2.0
                cj = loc[1] + (t.shape[0] - 1) / 2.0
                best = (
                    float(score),
                    x0 + ci * res,
                    z1 - cj * res,
                    float(-a % 90.0),
                    s,
                )  # image rows run along -z
    return best


def _rect_maps(
    H: MatHomography,
    origin: tuple[float, float],
    res: float,
    size: tuple[int, int],
    height: float,
    off: tuple[int, int],
) -> tuple[NDArray[Any], NDArray[Any]]:
    """remap maps of the rectified window (pixel (i, j) -> mat (x0 + i*res, z1 - j*res) on the
    plane y = ``height``) into the crop's raw pixels; cached on ``H``."""
    cache: dict[Any, tuple[NDArray[Any], NDArray[Any]]] = H.__dict__.setdefault("_rect_cache", {})
    key = (origin, res, size, height, off)
    if key not in cache:
        w, h = size
        ii, jj = np.meshgrid(np.arange(w, dtype=np.float64), np.arange(h, dtype=np.float64))
        xz = np.column_stack([origin[0] + ii.ravel() * res, origin[1] - jj.ravel() * res])
        uv = H.xzs_to_pixels(xz, height) - off
        cache[key] = (
            uv[:, 0].reshape(h, w).astype(np.float32),
            uv[:, 1].reshape(h, w).astype(np.float32),
        )
    return cache[key]


def detect_box(
    frame: NDArray[np.uint8],
    H: MatHomography,
    fallback_xz: tuple[float, float] = BOX_FALLBACK_XZ,
    score_thresh: float = BOX_SCORE_THRESH,
    config: PerceptionConfig = DEFAULT_CONFIG,
) -> BoxDetection:
    """The white box: by contour, else by template (score >= ``score_thresh``), else ``fallback_xz``.

    Never returns None: the fallback is the configured position, ``method == "fallback"``
    says so (with the best template score) and it is never trusted.
    """
    return _box_from(_View(frame, H, config), H, fallback_xz, score_thresh, config)


def _box_from(
    view: _View,
    H: MatHomography,
    fallback_xz: tuple[float, float],
    score_thresh: float,
    config: PerceptionConfig,
    blobs: list[NDArray[np.float32]] | None = None,
) -> BoxDetection:
    """``blobs``: when given, receives every white blob's outline (mm, rim plane) seen at the
    first white threshold and, in dim light, at the dim one too (``refind_box`` asks
    whether any lies near the old box: on harsh's dim light the rim is grey, and pieces of
    it beside the arm were missed at the first threshold, the box called gone)."""
    white = view.white()
    out = [] if blobs is None else blobs
    blobs = []
    found, why = _box_contour(white, view.off, H, config, blobs)
    out.extend(blobs)
    if found is not None:
        return found
    score, x, z, yaw, scale = _box_template(white, view.off, H, config)
    dim = view.dim_white_v() if score < score_thresh and config.white_v_auto else config.white_v_min
    if dim < config.white_v_min:  # dim light: the rim is grey, not white; look again
        white = view.white(dim)
        dim_blobs: list[NDArray[np.float32]] = []
        found, why2 = _box_contour(white, view.off, H, config, dim_blobs)
        out.extend(dim_blobs)
        if found is not None:
            return dataclasses.replace(found, reason=f"white threshold {dim} (dim light)")
        dim_score, *rest = _box_template(white, view.off, H, config)
        if dim_score > score:
            score, (x, z, yaw, scale), blobs = dim_score, rest, dim_blobs
        why = f"{why}; at white threshold {dim}: {why2}"
    u, v = H.xz_to_pixel(x, z, config.box_height_m)
    if score >= score_thresh:
        near = _nearest_blob_mm(blobs, x, z)
        doubt = ""
        if near > BOX_TEMPLATE_BLOB_MM:
            doubt = (
                f"template hit at ({x:+.3f}, {z:+.3f}) is {near:.0f} mm from the nearest white "
                f"blob (> {BOX_TEMPLATE_BLOB_MM:.0f} mm): nothing white is there"
            )
        return BoxDetection(
            x=x,
            z=z,
            yaw_deg=yaw,
            score=score,
            method="template",
            u=u,
            v=v,
            size_mm=(config.box_outer_m * 1000 * scale,) * 2,
            reason=why,
            trusted=not doubt,
            doubt=doubt,
        )
    return BoxDetection(
        x=float(fallback_xz[0]),
        z=float(fallback_xz[1]),
        yaw_deg=0.0,
        score=max(0.0, score),
        method="fallback",
        reason=f"{why}; best template score {score:.3f} < {score_thresh}",
        trusted=False,
        doubt="box not found: the position is the configured fallback",
    )


def refind_box(
    frames: list[NDArray[np.uint8]],
    H: MatHomography,
    detected: BoxDetection,
    config: PerceptionConfig = DEFAULT_CONFIG,
) -> tuple[BoxDetection, str]:
    """The box where it is now, from frames taken with the arm over it: (box, how).

    Each frame is searched afresh (contour, else template; never the fallback, never a
    template hit that doubts itself). ``found``: found again in most frames; the median
    position, the yaw of the best-scoring frame. Else ``hidden``: a piece of white rim
    still lies within ``BOX_TEMPLATE_BLOB_MM`` of where the box was in most frames (the
    arm and the block hide the rest); detect's box is returned. Else ``gone``: nothing
    white is there any more, the box was moved out from under the block
    (docs/release.md, "The box at the release")."""
    hits = []
    near = 0
    for f in frames:
        blobs: list[NDArray[np.float32]] = []
        b = _box_from(_View(f, H, config), H, (detected.x, detected.z), BOX_SCORE_THRESH,
                      config, blobs)  # fmt: skip
        if b.method != "fallback" and b.trusted:
            hits.append(b)
            continue
        near += _nearest_blob_mm(blobs, detected.x, detected.z) <= BOX_TEMPLATE_BLOB_MM
    if frames and 2 * len(hits) > len(frames):
        best = max(hits, key=lambda b: b.score)
        x = float(np.median([b.x for b in hits]))
        z = float(np.median([b.z for b in hits]))
        return dataclasses.replace(best, x=x, z=z), "found"
    if not frames or 2 * (near + len(hits)) > len(frames):
        return detected, "hidden"
    return detected, "gone"


def _nearest_blob_mm(blobs: list[NDArray[np.float32]], x: float, z: float) -> float:
    """Distance (mm, rim plane) from (x, z) to the nearest white blob's outline; 0 inside one.
    A rim broken into pieces (dim light, a cable across it) still has a piece within the
    rim's half-width (39 mm) of its centre."""
    best = math.inf
    p = (float(x * 1000.0), float(z * 1000.0))
    for pts in blobs:
        best = min(best, max(0.0, -cv2.pointPolygonTest(pts.reshape(-1, 1, 2), p, True)))
    return best


# ---------------------------------------------------------------- combined
_METHOD_RANK = {"contour": 0, "template": 1, "fallback": 2}


def _spread(xs: NDArray[np.float64], zs: NDArray[np.float64], x: float, z: float) -> float:
    return float(np.max(np.hypot(xs - x, zs - z)) * 1000.0) if len(xs) else 0.0


def combine_detections(
    blocks: Sequence[BlockDetection | None], boxes: Sequence[BoxDetection]
) -> SceneDetection:
    """Median of the repeats. The block counts only when seen in a majority of them;
    the box uses the samples of the best method present (contour > template > fallback)
    and is trusted only when all of them are and they lie within ``BOX_MAX_SPREAD_MM``."""
    found = [b for b in blocks if b is not None]
    block = None
    bspread = None
    if found and 2 * len(found) > len(blocks):
        xs = np.array([b.x for b in found])
        zs = np.array([b.z for b in found])
        mx, mz = float(np.median(xs)), float(np.median(zs))
        ref = min(found, key=lambda b: math.hypot(b.x - mx, b.z - mz))
        block = BlockDetection(
            x=mx,
            z=mz,
            yaw_deg=ref.yaw_deg,
            u=ref.u,
            v=ref.v,
            area_mm2=ref.area_mm2,
            height_m=ref.height_m,
        )
        bspread = _spread(xs, zs, mx, mz)
    rank = min(_METHOD_RANK[b.method] for b in boxes)
    same = [b for b in boxes if _METHOD_RANK[b.method] == rank]
    xs = np.array([b.x for b in same])
    zs = np.array([b.z for b in same])
    mx, mz = float(np.median(xs)), float(np.median(zs))
    bref = min(same, key=lambda b: math.hypot(b.x - mx, b.z - mz))
    spread = _spread(xs, zs, mx, mz)
    doubtful = [b.doubt for b in same if not b.trusted]
    doubts = []
    if doubtful:
        n = f"{len(doubtful)} of {len(same)} samples: " if len(same) > 1 else ""
        doubts.append(n + doubtful[0])
    if spread > BOX_MAX_SPREAD_MM:
        doubts.append(
            f"the {len(same)} {bref.method} samples spread {spread:.0f} mm "
            f"(> {BOX_MAX_SPREAD_MM:.0f} mm)"
        )
    box = BoxDetection(
        x=mx,
        z=mz,
        yaw_deg=bref.yaw_deg,
        score=float(np.median([b.score for b in same])),
        method=bref.method,
        u=bref.u,
        v=bref.v,
        size_mm=bref.size_mm,
        reason=bref.reason,
        trusted=not doubts,
        doubt="; ".join(doubts),
    )
    return SceneDetection(
        block=block,
        box=box,
        block_samples=list(blocks),
        box_samples=list(boxes),
        block_spread_mm=bspread,
        box_spread_mm=spread,
    )


def detect_scene(
    frames: Sequence[NDArray[np.uint8]],
    H: MatHomography,
    fallback_xz: tuple[float, float] = BOX_FALLBACK_XZ,
    score_thresh: float = BOX_SCORE_THRESH,
    config: PerceptionConfig = DEFAULT_CONFIG,
) -> SceneDetection:
    """Block and box in each of the DETECT_REPEAT captures, combined (``combine_detections``)."""
    if not frames:
        raise ValueError("detect_scene needs at least one frame")
    blocks: list[BlockDetection | None] = []
    boxes: list[BoxDetection] = []
    for f in frames:
        view = _View(f, H, config)  # one colour conversion for both objects
        blocks.append(_block_from(view, H, config, config.block_size_m, None))
        boxes.append(_box_from(view, H, fallback_xz, score_thresh, config))
    return combine_detections(blocks, boxes)


# ---------------------------------------------------------------- red pixels in regions (judges)
def red_counts(
    frame: NDArray[np.uint8],
    polys_px: Sequence[NDArray[np.float64]],
    pad_px: int = 0,
    config: PerceptionConfig = DEFAULT_CONFIG,
) -> tuple[list[int], int]:
    """Red (block-coloured) pixels inside each polygon (N x 2 frame pixels), and in the
    bounding rectangle of all of them padded by ``pad_px``. Only that rectangle is converted."""
    _check_frame(frame)
    h, w = frame.shape[:2]
    allp = np.concatenate([np.asarray(p, np.float64).reshape(-1, 2) for p in polys_px])
    if not np.all(np.isfinite(allp)):
        return [0] * len(polys_px), 0
    x0 = max(0, int(np.floor(allp[:, 0].min())) - pad_px)
    y0 = max(0, int(np.floor(allp[:, 1].min())) - pad_px)
    x1 = min(w, int(np.ceil(allp[:, 0].max())) + pad_px + 1)
    y1 = min(h, int(np.ceil(allp[:, 1].max())) + pad_px + 1)
    if x1 <= x0 or y1 <= y0:
        return [0] * len(polys_px), 0
    hsv = cv2.cvtColor(frame[y0:y1, x0:x1], cv2.COLOR_BGR2HSV)
    s, v = config.red_s_min, config.red_v_min
    red = cv2.bitwise_or(
        cv2.inRange(hsv, (0, s, v), (10, 255, 255)),
        cv2.inRange(hsv, (170, s, v), (180, 255, 255)),
    )
    counts = []
    for p in polys_px:
        m = np.zeros_like(red)
        pts = np.round((np.asarray(p, np.float64).reshape(-1, 2) - [x0, y0]) * 16).astype(np.int32)
        cv2.fillPoly(m, [pts], 255, cv2.LINE_8, 4)
        counts.append(int(cv2.countNonZero(cv2.bitwise_and(red, m))))
    return counts, int(cv2.countNonZero(red))
