"""Stage images: a top-camera capture with what the runtime saw and decided drawn on it.

Why: a raw frame shows the scene but not the runtime's reading of it; the operator
looking at ``detect_attempt1_detect.jpg`` wants to see where the block and the box
were found, how the mat was mapped, how far the tip was from the block and what the
judge said. The marks are drawn on a copy, after the stage decided, from the same
detection objects the decision used: nothing drawn here ever feeds a decision
(docs/stage-images.md).

``StageMarks`` holds what one capture's overlay shows (every field optional: a
capture with missing data still gets its header and whatever is known);
``draw_stage`` draws it; ``stage_jpegs`` returns the stage image and the raw image
as JPEG bytes and never raises: a failure to draw gives the raw frame with a warning.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import cv2
import numpy as np
from numpy.typing import NDArray

from mecharm.common.logging import get_logger
from mecharm.runtime.perception.config import DEFAULT_CONFIG, PerceptionConfig
from mecharm.runtime.perception.homography import MatHomography, detect_markers
from mecharm.runtime.perception.results import (
    BlockDetection,
    BoxDetection,
    SceneDetection,
    TipMeasurement,
)

__all__ = [
    "COLOURS",
    "JPEG_QUALITY",
    "StageMarks",
    "VerdictMark",
    "draw_stage",
    "stage_jpegs",
    "warm_up",
]

log = get_logger("mecharm.runtime.perception.overlay")

#: BGR colours of the marks (docs/stage-images.md has the legend)
COLOURS: dict[str, tuple[int, int, int]] = {
    "grid": (150, 150, 150),
    "marker": (0, 255, 0),  # detected marker corners
    "marker_fit": (255, 0, 255),  # the configured corners through the fitted homography
    "block": (255, 255, 0),  # cyan: the block's top face and centre
    "box": (0, 165, 255),  # orange: the box's rim
    "box_doubt": (0, 0, 255),
    "tip": (0, 255, 255),  # yellow: the tip marker and the tip -> block error
    "target": (180, 105, 255),  # pink: servo, held block -> box centre
    "yes": (0, 200, 0),
    "no": (0, 0, 230),
    "text": (255, 255, 255),
    "panel": (0, 0, 0),
}
#: the quality cv2.imwrite used for the stage images before the overlay
JPEG_QUALITY = 95
#: mat grid spacing (m)
GRID_M = 0.05


@dataclass(frozen=True)
class VerdictMark:
    """A judge's answer as drawn: ``label`` names what was judged (pick, place, release)."""

    label: str
    verdict: str
    confidence: float
    reason: str
    judge: str = ""


@dataclass
class StageMarks:
    """What one capture's overlay shows. ``stage`` is the capture's tag (file name);
    ``wall_ts`` its capture time. Geometry needs ``H``; without it only text is drawn."""

    stage: str
    wall_ts: float | None = None
    H: MatHomography | None = None
    #: find the ArUco markers in the frame again, to draw their corners (the mat capture)
    markers: bool = False
    grid: bool = False
    scene: SceneDetection | None = None
    #: the block as located in this frame (held during the place servo), and the box
    block: BlockDetection | None = None
    box: BoxDetection | None = None
    #: the tip marker in this frame vs the block (descend_pick)
    tip: TipMeasurement | None = None
    #: servo: the point the held block is steered to (the box centre), on the block's plane
    target_xz: tuple[float, float] | None = None
    verdict: VerdictMark | None = None
    #: the figures the stage decided on, one per line (medians over the capture's frames)
    lines: list[str] = field(default_factory=list)
    #: True: the stage failed or doubted; its lines are drawn in the warning colour
    warn: bool = False


# ------------------------------------------------------------------------------ drawing
def _scale(frame: NDArray[np.uint8]) -> float:
    return max(0.4, frame.shape[1] / 1920.0)


def _pts(uv: NDArray[np.float64]) -> NDArray[np.int32]:
    return np.round(np.asarray(uv, np.float64).reshape(-1, 1, 2) * 16).astype(np.int32)


def _poly(
    img: NDArray[np.uint8], uv: NDArray[np.float64], colour: tuple[int, int, int], t: int
) -> None:
    if np.all(np.isfinite(uv)):
        cv2.polylines(img, [_pts(uv)], True, colour, t, cv2.LINE_AA, shift=4)


def _line(
    img: NDArray[np.uint8], uv: NDArray[np.float64], colour: tuple[int, int, int], t: int
) -> None:
    if np.all(np.isfinite(uv)):
        cv2.polylines(img, [_pts(uv)], False, colour, t, cv2.LINE_AA, shift=4)


def _label(
    img: NDArray[np.uint8],
    text: str,
    org: tuple[float, float],
    colour: tuple[int, int, int],
    s: float,
    right: bool = False,
) -> None:
    """Text on a dark box, kept inside the frame; ``right``: the text ends at ``org``."""
    font, fs, th = cv2.FONT_HERSHEY_SIMPLEX, 0.6 * s, max(1, round(1.4 * s))
    (w, h), base = cv2.getTextSize(text, font, fs, th)
    x = int(min(max(0.0, org[0] - (w if right else 0)), img.shape[1] - w - 4))
    y = int(min(max(float(h + 4), org[1]), img.shape[0] - base - 2))
    cv2.rectangle(img, (x - 2, y - h - 3), (x + w + 2, y + base + 1), COLOURS["panel"], -1)
    cv2.putText(img, text, (x, y), font, fs, colour, th, cv2.LINE_AA)


def _cross(
    img: NDArray[np.uint8], u: float, v: float, colour: tuple[int, int, int], s: float
) -> None:
    """A filled dot with a cross: the centre the stage used."""
    r = max(3, round(5 * s))
    c = (round(u), round(v))
    cv2.circle(img, c, r, colour, -1, cv2.LINE_AA)
    cv2.line(img, (c[0] - 3 * r, c[1]), (c[0] + 3 * r, c[1]), colour, max(1, r // 2), cv2.LINE_AA)
    cv2.line(img, (c[0], c[1] - 3 * r), (c[0], c[1] + 3 * r), colour, max(1, r // 2), cv2.LINE_AA)


def _arrow(
    img: NDArray[np.uint8],
    a: tuple[float, float],
    b: tuple[float, float],
    colour: tuple[int, int, int],
    s: float,
) -> None:
    if all(math.isfinite(v) for v in (*a, *b)):
        cv2.arrowedLine(
            img,
            (round(a[0]), round(a[1])),
            (round(b[0]), round(b[1])),
            colour,
            max(2, round(2 * s)),
            cv2.LINE_AA,
            tipLength=0.2,
        )


def _grid(img: NDArray[np.uint8], H: MatHomography, cfg: PerceptionConfig, s: float) -> None:
    """The mat's outline and a 50 mm grid, through the homography (bent by the lens if any)."""
    (x0, x1), (z0, z1) = cfg.mat_x, cfg.mat_z
    t = max(1, round(s))
    n = 24  # points per line: the lens bends them
    xs = np.arange(math.ceil(x0 / GRID_M) * GRID_M, x1 + 1e-9, GRID_M)
    zs = np.arange(math.ceil(z0 / GRID_M) * GRID_M, z1 + 1e-9, GRID_M)
    along_z, along_x = np.linspace(z0, z1, n), np.linspace(x0, x1, n)
    lines = [np.column_stack([np.full(n, x), along_z]) for x in xs]
    lines += [np.column_stack([along_x, np.full(n, z)]) for z in zs]
    # one mapping and one drawing call for the whole grid: every OpenCV call gives up the
    # GIL, and a busy process makes each one wait for it again
    uv = H.xzs_to_pixels(np.vstack(lines)).reshape(len(lines), n, 2)
    ok = [_pts(line) for line in uv if np.all(np.isfinite(line))]
    cv2.polylines(img, ok, False, COLOURS["grid"], t, cv2.LINE_AA, shift=4)
    edge = np.array([[x0, z0], [x1, z0], [x1, z1], [x0, z1]])
    _poly(img, H.xzs_to_pixels(edge), COLOURS["grid"], 2 * t)
    for x in (-0.2, 0.0, 0.2):
        u, v = H.xz_to_pixel(x, z0)
        _label(img, f"x {x:+.1f}", (u, v + 22 * s), COLOURS["grid"], 0.8 * s)
    for z in (0.1, 0.2, 0.3, 0.4):
        u, v = H.xz_to_pixel(x1, z)
        _label(img, f"z {z:.1f}", (u - 70 * s, v), COLOURS["grid"], 0.8 * s)


def _markers(
    img: NDArray[np.uint8], frame: NDArray[np.uint8], H: MatHomography | None,
    cfg: PerceptionConfig, s: float,
) -> None:  # fmt: skip
    """The ArUco markers found in this frame (green, with id), and where the fitted homography
    puts each configured marker (magenta): the two agree to the homography's error."""
    found = _find_markers(frame, H, cfg)
    for mid, c in sorted(found.items()):
        _poly(img, c, COLOURS["marker"], max(2, round(2 * s)))
        cv2.circle(
            img, (round(c[0][0]), round(c[0][1])), max(3, round(4 * s)), COLOURS["marker"], -1
        )
        _label(img, f"id {mid}", (c[:, 0].min(), c[:, 1].min() - 8 * s), COLOURS["marker"], s)
    for m in cfg.markers:
        if H is not None:
            _poly(
                img,
                H.xzs_to_pixels(np.array(m.corners_xz)),
                COLOURS["marker_fit"],
                max(1, round(s)),
            )
        if m.id not in found and H is not None:
            u, v = H.xz_to_pixel(*m.center_xz)
            _label(img, f"id {m.id} {m.name}: NOT FOUND", (u, v), COLOURS["no"], s)


def _find_markers(
    frame: NDArray[np.uint8], H: MatHomography | None, cfg: PerceptionConfig
) -> dict[int, NDArray[np.float64]]:
    """The markers in this frame: as the homography's own search found them in its first frame
    (the frame drawn), else searched around where the homography puts each one (a whole-frame
    search costs ~10x more), else, with no homography, in the whole frame."""
    if H is None:
        return detect_markers(frame)
    if H.first_frame_markers:
        return dict(H.first_frame_markers)
    out: dict[int, NDArray[np.float64]] = {}
    h, w = frame.shape[:2]
    for m in cfg.markers:
        c = H.xzs_to_pixels(np.array(m.corners_xz))
        if not np.all(np.isfinite(c)):
            continue
        pad = max(80.0, float(np.ptp(c[:, 0])))
        x0, y0 = max(0, int(c[:, 0].min() - pad)), max(0, int(c[:, 1].min() - pad))
        x1, y1 = min(w, int(c[:, 0].max() + pad)), min(h, int(c[:, 1].max() + pad))
        if x1 - x0 < 8 or y1 - y0 < 8:
            continue
        crop = np.ascontiguousarray(frame[y0:y1, x0:x1])
        seen = detect_markers(crop).get(m.id)
        if seen is not None:
            out[m.id] = seen + np.array([x0, y0], np.float64)
    return out


def _block(
    img: NDArray[np.uint8], H: MatHomography, b: BlockDetection, cfg: PerceptionConfig,
    s: float, name: str = "block",
) -> tuple[float, float]:  # fmt: skip
    """The block's top face (the plane it was measured on) and its centre; returns the centre pixel."""
    face = H.square_to_pixels(b.x, b.z, cfg.block_size_m / 2.0, b.yaw_deg, b.height_m)
    _poly(img, face, COLOURS["block"], max(2, round(2 * s)))
    u, v = H.xz_to_pixel(b.x, b.z, b.height_m)
    _cross(img, u, v, COLOURS["block"], s)
    top = float(face[:, 1].min())
    _label(
        img,
        f"{name} x {b.x:+.4f} z {b.z:+.4f} m  yaw {b.yaw_deg:.1f}  top at {b.height_m * 1000:.0f} mm",
        (float(face[:, 0].max()) + 14 * s, top),
        COLOURS["block"],
        s,
    )
    return u, v


def _box(
    img: NDArray[np.uint8], H: MatHomography, b: BoxDetection, cfg: PerceptionConfig, s: float
) -> None:
    colour = COLOURS["box"] if b.trusted else COLOURS["box_doubt"]
    t = max(2, round(2 * s))
    for half in (cfg.box_outer_m / 2.0, cfg.box_inner_m / 2.0):
        _poly(img, H.square_to_pixels(b.x, b.z, half, b.yaw_deg, cfg.box_height_m), colour, t)
    u, v = H.xz_to_pixel(b.x, b.z, cfg.box_height_m)
    _cross(img, u, v, colour, s)
    rim = H.square_to_pixels(b.x, b.z, cfg.box_outer_m / 2.0, b.yaw_deg, cfg.box_height_m)
    text = f"box x {b.x:+.4f} z {b.z:+.4f} m  {b.method} score {b.score:.2f}"
    text += "" if b.trusted else "  NOT TRUSTED"
    _label(img, text, (float(rim[:, 0].min()), float(rim[:, 1].max()) + 24 * s), colour, s)


def _tip(img: NDArray[np.uint8], H: MatHomography, tip: TipMeasurement, s: float) -> None:
    """The tip marker, and the arrow from the block (on the tip's plane) to it: the offset
    tip - block that the pick servo and the correction memory act on."""
    cv2.circle(
        img,
        (round(tip.u), round(tip.v)),
        max(6, round(12 * s)),
        COLOURS["tip"],
        max(2, round(2 * s)),
        cv2.LINE_AA,
    )
    bu, bv = H.xz_to_pixel(tip.block_x, tip.block_z, tip.tip_height_m)
    _arrow(img, (bu, bv), (tip.u, tip.v), COLOURS["tip"], s)
    _label(
        img,
        f"tip - block dx {tip.dx_mm:+.1f} dz {tip.dz_mm:+.1f} mm ({tip.dist_mm:.1f})",
        (tip.u + 18 * s, tip.v + 30 * s),
        COLOURS["tip"],
        s,
    )


def _target(
    img: NDArray[np.uint8], H: MatHomography, b: BlockDetection, xz: tuple[float, float], s: float
) -> None:
    """Servo: the arrow from the held block to the point it is steered to, with the error in mm
    (labelled left of the block: the block's own label is on its right)."""
    a = H.xz_to_pixel(b.x, b.z, b.height_m)
    t = H.xz_to_pixel(xz[0], xz[1], b.height_m)
    _arrow(img, a, t, COLOURS["target"], s)
    dx, dz = (xz[0] - b.x) * 1000.0, (xz[1] - b.z) * 1000.0
    left = min(a[0], t[0]) - 30 * s
    _label(
        img,
        f"to box centre dx {dx:+.1f} dz {dz:+.1f} mm",
        (left, a[1] + 8 * s),
        COLOURS["target"],
        s,
        right=True,
    )


def _header(img: NDArray[np.uint8], m: StageMarks, s: float) -> None:
    when = ""
    if m.wall_ts is not None:
        when = (
            time.strftime("%H:%M:%S", time.localtime(m.wall_ts))
            + f".{int(m.wall_ts % 1 * 1000):03d}"
        )
    _label(img, f"{m.stage}   {when}", (10 * s, 34 * s), COLOURS["text"], 1.3 * s)
    y = 70 * s
    if m.verdict is not None:
        v = m.verdict
        colour = COLOURS["yes"] if v.verdict == "yes" else COLOURS["no"]
        judge = f" ({v.judge})" if v.judge else ""
        _label(
            img,
            f"{v.label}: {v.verdict.upper()}  confidence {v.confidence:.2f}{judge}",
            (10 * s, y),
            colour,
            1.2 * s,
        )
        y += 34 * s
        for chunk in _wrap(v.reason, 110):
            _label(img, chunk, (10 * s, y), colour, s)
            y += 26 * s
    for line in m.lines:
        for chunk in _wrap(line, 110):
            _label(img, chunk, (10 * s, y), COLOURS["no"] if m.warn else COLOURS["text"], s)
            y += 26 * s


def _wrap(text: str, width: int) -> list[str]:
    words, out, cur = text.split(), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            out.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    return [*out, cur] if cur else out


def _finite(what: str, *values: float) -> None:
    """A non-finite figure cannot be drawn (OpenCV would put it at pixel 0, 0): refuse it."""
    if not all(math.isfinite(float(v)) for v in values):
        raise ValueError(f"{what}: non-finite value in {values}")


def draw_stage(
    frame: NDArray[np.uint8], marks: StageMarks, config: PerceptionConfig = DEFAULT_CONFIG
) -> NDArray[np.uint8]:
    """A copy of ``frame`` with ``marks`` drawn on it; raises on a frame that is not BGR uint8."""
    if (
        not isinstance(frame, np.ndarray)
        or frame.dtype != np.uint8
        or frame.ndim != 3
        or frame.shape[2] != 3
    ):
        raise ValueError(f"not a BGR uint8 frame: {getattr(frame, 'shape', type(frame).__name__)}")
    img = frame.copy()
    s = _scale(img)
    H = marks.H
    if H is not None and marks.grid:
        _grid(img, H, config, s)
    if marks.markers:
        _markers(img, frame, H, config, s)
    if H is not None:
        _check(marks)
        scene = marks.scene
        if scene is not None:
            _box(img, H, scene.box, config, s)
            if scene.block is not None:
                _block(img, H, scene.block, config, s, "block at detect")
        if marks.box is not None:
            _box(img, H, marks.box, config, s)
        if marks.block is not None:
            _block(img, H, marks.block, config, s, "block now")
            if marks.target_xz is not None:
                _target(img, H, marks.block, marks.target_xz, s)
        if marks.tip is not None:
            _tip(img, H, marks.tip, s)
    _header(img, marks, s)
    return img


def _check(m: StageMarks) -> None:
    blocks = [b for b in (m.block, m.scene.block if m.scene else None) if b is not None]
    for b in blocks:
        _finite("block", b.x, b.z, b.yaw_deg, b.height_m)
    for x in (m.box, m.scene.box if m.scene else None):
        if x is not None:
            _finite("box", x.x, x.z, x.yaw_deg)
    if m.tip is not None:
        t = m.tip
        _finite("tip", t.u, t.v, t.block_x, t.block_z, t.tip_height_m)
    if m.target_xz is not None:
        _finite("servo target", *m.target_xz)


def warm_up() -> None:
    """Load OpenCV's font once, outside any trial: its first use costs ~25 ms, which would
    otherwise land on a trial's first stage image."""
    cv2.putText(np.zeros((8, 8, 3), np.uint8), "0", (0, 7), cv2.FONT_HERSHEY_SIMPLEX, 0.2,
                (255, 255, 255), 1, cv2.LINE_AA)  # fmt: skip


# ------------------------------------------------------------------------------ encoding
def _encode(img: NDArray[np.uint8]) -> bytes:
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
    if not ok:
        raise ValueError("JPEG encoding failed")
    return bytes(buf)


def stage_jpegs(
    frame: NDArray[np.uint8],
    jpeg: bytes | None,
    marks: StageMarks | None,
    config: PerceptionConfig = DEFAULT_CONFIG,
) -> tuple[bytes, bytes]:
    """(stage image, raw image) as JPEG bytes. The raw image is the camera's own JPEG when it
    sent one (the exact pixels perception decoded), else the frame encoded. Drawing never fails
    the caller: on any error the stage image is the raw one and a warning is logged."""
    raw = jpeg if jpeg is not None else _encode(frame)
    if marks is None:
        return raw, raw
    try:
        return _encode(draw_stage(frame, marks, config)), raw
    except Exception as exc:  # an odd frame or odd data: the raw frame, never a failed trial
        log.warning(
            "stage_overlay_failed",
            stage=marks.stage,
            error=f"{type(exc).__name__}: {exc}"[:200],
        )
        return raw, raw
