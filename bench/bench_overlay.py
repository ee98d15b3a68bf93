"""Stage-image overlay benchmark: what the overlay costs per capture (docs/stage-images.md).

Figures:
* the work per image, paired per capture on a rendered 1920x1080 top-camera frame received
  as the simulated camera sends it (JPEG, quality 80): the baseline is what the eyes did
  before the overlay, and what the stage waited for (``cv2.imwrite`` of the decoded frame);
  the target is the drawing thread's work now (``CameraEyes._save_sync``: the camera's JPEG
  written as the raw frame, the overlay drawn on a copy, encoded and written). Calls
  alternate so both see the same load; the median of the paired differences is the extra
  CPU work per capture;
* the stage's own wait per capture in whole trials on the simulated rig (daemon and workcell
  as a process, 20x): how long ``CameraEyes.save`` holds the stage now (it hands the image to
  the drawing thread and waits only for the previous image), and the drawing thread's time.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from bench import Row, has
from mecharm.common.config import load_settings
from mecharm.common.logging import configure_logging
from mecharm.runtime.camera_eyes import CameraEyes, StageCapture
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.perception import DEFAULT_CONFIG, detect_scene, estimate_homography
from mecharm.runtime.perception.overlay import StageMarks, VerdictMark, draw_stage
from mecharm.runtime.rigsetup import open_rig
from mecharm.runtime.simcontrol import scene_next
from mecharm.runtime.trial import run_trial
from mecharm.sim.render import TOP_CAMERA, Renderer, SceneSnapshot
from mecharm.sim.scene import SceneState, random_layout
from mecharm.tools.simrig import start_sim_daemon

__all__ = ["run"]

HOME = (0.0, 0.0, 0.0, 0.0, 0.0, -30.0)


def _timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000.0


async def _trials(
    settings: RuntimeSettings, control_url: str, n: int
) -> tuple[list[float], list[float]]:
    """(the stage's wait per save, the drawing thread's time per image) over ``n`` trials."""
    waits: list[float] = []
    work: list[float] = []
    async with open_rig(settings) as (rig, _client):
        eyes = rig.eyes
        assert isinstance(eyes, CameraEyes)
        save, save_sync = eyes.save, eyes._save_sync

        async def timed_save(cap: StageCapture, marks: StageMarks | None) -> str:
            t0 = time.perf_counter()
            try:
                return await save(cap, marks)
            finally:
                waits.append((time.perf_counter() - t0) * 1000.0)

        def timed_sync(*a: Any) -> str:
            t0 = time.perf_counter()
            try:
                return save_sync(*a)
            finally:
                work.append((time.perf_counter() - t0) * 1000.0)

        eyes.save, eyes._save_sync = timed_save, timed_sync  # type: ignore[method-assign]
        for k in range(n):
            await asyncio.to_thread(scene_next, control_url, 7 + k)
            await run_trial(rig, scene_seed=7 + k)
    return waits, work


def _in_trials(n: int) -> dict[str, Any]:
    scale = 20.0
    with tempfile.TemporaryDirectory(prefix="bench_overlay_") as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        rig = start_sim_daemon(Path(tmp) / "logs", seed=7, time_scale=scale)
        try:
            settings = load_settings(
                RuntimeSettings,
                overrides={"data_root": root, "daemon_port": rig.daemon_port,
                           "top_camera": rig.top_url, "recorder_enabled": False,
                           "time_scale": scale, "release_side_check": False,
                           "log_level": "warning"},
            )  # fmt: skip
            waits, work = asyncio.run(_trials(settings, rig.control_url, n))
        finally:
            rig.daemon.stop()
    return {
        "trials": n,
        "stage_images": len(waits),
        "trial_stage_wait_ms_median": round(statistics.median(waits), 2),
        "trial_stage_wait_ms_max": round(max(waits), 2),
        "trial_stage_wait_ms_total_per_trial": round(sum(waits) / n, 1),
        "trial_drawing_thread_ms_median": round(statistics.median(work), 2),
    }


def run(quick: bool = False) -> dict[str, Any]:
    configure_logging("warning")
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
    out.update(_in_trials(1 if quick else 3))
    return out


def rows(result: dict[str, Any]) -> list[Row]:
    """The table's lines: the overlay's extra work per capture, and what the stage waits."""
    r, out = result, []
    for kind in ("detect", "mat", "judge"):
        add, before = f"{kind}_added_ms_median_paired", f"{kind}_before_ms"
        if has(r, add, before, f"{kind}_after_ms"):
            out.append(
                Row(
                    "stage images",
                    f"overlay work per `{kind}` capture (1920x1080, paired)",
                    f"+{r[add]} ms ({r[f'{kind}_after_ms']} ms in all)",
                    "—",
                    f"saving the frame without overlay {r[before]} ms",
                )
            )
    if has(r, "trial_stage_wait_ms_median", "trial_stage_wait_ms_max"):
        out.append(
            Row(
                "stage images",
                f"the stage's wait per capture, {r.get('trials', '?')} trial(s) at 20x",
                f"median {r['trial_stage_wait_ms_median']} ms, max {r['trial_stage_wait_ms_max']} ms",
                "—",
                f"drawing thread's work median {r.get('trial_drawing_thread_ms_median', '?')} ms",
            )
        )
    return out
