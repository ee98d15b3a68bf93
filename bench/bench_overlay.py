"""Stage-image overlay benchmark: what drawing the overlay adds to each capture.

Paired per capture, on a rendered 1920x1080 top-camera frame received as the simulated
camera sends it (JPEG, quality 80): the baseline is what the eyes did before the overlay
(``cv2.imwrite`` of the decoded frame: encode + write); the target is what they do now
(``CameraEyes._save_sync``: the camera's JPEG written as the raw frame, the overlay drawn
on a copy, encoded and written). Both run in the worker thread, never on the event loop;
the figure is the time a stage waits for its image, before and after. Calls alternate
(baseline, target, baseline, ...) so both see the same machine load; the median of the
paired differences is the added time per capture (docs/stage-images.md).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from mecharm_runtime.eyes import CameraEyes, StageCapture
from mecharm_runtime.perception import DEFAULT_CONFIG, detect_scene, estimate_homography
from mecharm_runtime.perception.overlay import StageMarks, VerdictMark, draw_stage
from mecharm_sim.render import TOP_CAMERA, Renderer, SceneSnapshot
from mecharm_sim.scene import SceneState, random_layout

__all__ = ["run"]

HOME = (0.0, 0.0, 0.0, 0.0, 0.0, -30.0)


def _timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000.0


def run(quick: bool = False) -> dict[str, Any]:
    n = 15 if quick else 60
    snap = SceneSnapshot.of(SceneState(random_layout(3)))
    rendered = [Renderer(TOP_CAMERA, 1).render(snap, HOME, 100.0) for _ in range(3)]
    jpeg = bytes(cv2.imencode(".jpg", rendered[0], [cv2.IMWRITE_JPEG_QUALITY, 80])[1])
    frame = np.asarray(cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR), np.uint8)
    H = estimate_homography(rendered)
    scene = detect_scene(rendered, H)
    kinds = {
        "detect": StageMarks("detect_attempt1_detect", time.time(), H, grid=True, scene=scene,
                             lines=["block found in 3/3 frames", "box: contour, score 0.97"]),
        "mat": StageMarks("detect_attempt1_mat", time.time(), H, markers=True, grid=True,
                          lines=["mat homography from 10 frames"]),
        "judge": StageMarks("lift_judge_attempt1", time.time(), H, scene=scene,
                            verdict=VerdictMark("pick", "yes", 0.95, "block left its mat position "
                                                "and is held at the gripper tip in 3/3 frames")),
    }  # fmt: skip
    eyes = CameraEyes.__new__(CameraEyes)  # only the writer, no camera
    eyes.config = DEFAULT_CONFIG
    out: dict[str, Any] = {"frame": "1920x1080", "calls_per_figure": n}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for name, marks in kinds.items():
            cap = StageCapture(marks.stage, [frame], jpeg, time.time())
            before, after, draw = [], [], []
            for _ in range(n):
                before.append(_timed(lambda: cv2.imwrite(str(d / "old.jpg"), frame)))
                after.append(_timed(lambda cap=cap, marks=marks: eyes._save_sync(d, cap, marks)))
                draw.append(_timed(lambda marks=marks: draw_stage(frame, marks)))
            added = [a - b for a, b in zip(after, before, strict=True)]
            out[f"{name}_before_ms"] = round(statistics.median(before), 2)
            out[f"{name}_after_ms"] = round(statistics.median(after), 2)
            out[f"{name}_added_ms_median_paired"] = round(statistics.median(added), 2)
            out[f"{name}_draw_only_ms"] = round(statistics.median(draw), 2)
    return out
