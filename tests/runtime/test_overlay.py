"""Stage images with overlays (docs/stage-images.md): the marks land where the detections are,
a capture with missing or odd data still writes an image, and a whole trial on the simulated
rig leaves overlaid stage images whose raw frames are exactly what perception used."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from numpy.typing import NDArray
from structlog.testing import capture_logs

from mecharm.common.layout import STAGE_RAW
from mecharm.runtime.camera_eyes import CameraEyes, StageCapture
from mecharm.runtime.perception import (
    DEFAULT_CONFIG,
    MatHomography,
    detect_scene,
    estimate_homography,
)
from mecharm.runtime.perception.overlay import (
    COLOURS,
    StageMarks,
    VerdictMark,
    draw_stage,
    stage_jpegs,
)
from mecharm.runtime.perception.results import BlockDetection, SceneDetection, TipMeasurement
from mecharm.runtime.perception.tip import find_tip_marker
from mecharm.runtime.records.trace import read_trace
from mecharm.runtime.rigsetup import open_rig
from mecharm.runtime.trial import run_trial
from mecharm.sim.render import TOP_CAMERA, Renderer, SceneSnapshot
from mecharm.sim.scene import Pose, SceneLayout, SceneState
from mecharm.sim.workcell import Workcell, WorkcellConfig
from mecharm.tools.view.overlays import find_homography
from mecharm.tools.view.trialfiles import stage_images

from .conftest import SimDaemon, trial_settings

HOME = (0.0, 0.0, 0.0, 0.0, 0.0, -30.0)
#: the pick pose over a block near (0.20, 0.26): the tip's green marker is in view
OVER_BLOCK = (-31.93, 87.74, -38.33, 18.6, -45.11, -30.0)


def _frames(
    n: int, angles: tuple[float, ...] = HOME, block: tuple[float, float] = (0.20, 0.26)
) -> list[NDArray[np.uint8]]:
    layout = SceneLayout(
        block=Pose(x=block[0], z=block[1], yaw_deg=20.0), box=Pose(x=-0.20, z=0.18, yaw_deg=10.0)
    )
    snap = SceneSnapshot.of(SceneState(layout))
    r = Renderer(TOP_CAMERA, 0)
    return [np.asarray(r.render(snap, angles, 100.0), np.uint8) for _ in range(n)]


@pytest.fixture(scope="module")
def scene() -> tuple[list[NDArray[np.uint8]], MatHomography, SceneDetection]:
    frames = _frames(3)
    H = estimate_homography(frames)
    return frames, H, detect_scene(frames, H)


def _changed(a: NDArray[np.uint8], b: NDArray[np.uint8]) -> NDArray[np.bool_]:
    return np.any(a != b, axis=2)


def test_block_marks_are_drawn_at_the_detection_and_nowhere_else(scene: Any) -> None:
    frames, H, sc = scene
    block: BlockDetection = sc.block
    assert block is not None
    img = draw_stage(frames[0], StageMarks("detect_attempt1_detect", None, H, block=block))
    u, v = H.xz_to_pixel(block.x, block.z, block.height_m)
    cu, cv = round(u), round(v)
    # the centre dot is the block colour, in a 5x5 patch around the detected centre
    patch = img[cv - 2 : cv + 3, cu - 2 : cu + 3].reshape(-1, 3)
    assert all(tuple(int(c) for c in p) == COLOURS["block"] for p in patch)
    # the marks change pixels only near the block (its outline, centre, label) and in the
    # header; the box, the arm, the rest of the mat are untouched
    changed = _changed(img, frames[0])
    assert changed[cv, cu]
    s = frames[0].shape[1] / 1920.0
    allowed = np.zeros_like(changed)
    allowed[: round(60 * s), : round(900 * s)] = True  # header: stage name
    allowed[max(0, cv - round(80 * s)) : cv + round(60 * s), max(0, cu - round(60 * s)) : cu + round(900 * s)] = True  # fmt: skip
    assert not np.any(changed & ~allowed), "overlay drew outside the block's neighbourhood"
    bu, bv = H.xz_to_pixel(sc.box.x, sc.box.z, DEFAULT_CONFIG.box_height_m)
    assert not changed[round(bv) - 60 : round(bv) + 60, round(bu) - 60 : round(bu) + 60].any()
    assert not np.shares_memory(img, frames[0])  # drawn on a copy: perception's frame is intact


def test_tip_error_and_verdict_marks() -> None:
    frames = _frames(1, OVER_BLOCK)
    H = estimate_homography(_frames(3))
    found = find_tip_marker(frames[0], H, 0.03)
    assert found is not None, "the tip marker must be in view over the block"
    u, v, x, z = found
    tip = TipMeasurement(x, z, 0.20, 0.26, (x - 0.2) * 1e3, (z - 0.26) * 1e3, 1.0, u, v, 0.03)
    verdict = VerdictMark("pick", "no", 0.61, "pick failed: block still at its mat position", "g")
    img = draw_stage(frames[0], StageMarks("descend_pick_tip", 0.0, H, tip=tip, verdict=verdict))
    # the tip ring is drawn around the marker's centre, in the tip colour
    r = max(6, round(12 * frames[0].shape[1] / 1920.0))
    ring = [
        img[round(v + r * math.sin(a)), round(u + r * math.cos(a))]
        for a in np.linspace(0, 6.28, 16)
    ]
    assert sum(tuple(int(c) for c in p) == COLOURS["tip"] for p in ring) >= 8
    # the verdict is drawn in the "no" colour in the header band
    header = img[: round(140 * frames[0].shape[1] / 1920.0)].reshape(-1, 3)
    assert np.any(np.all(header == COLOURS["no"], axis=1))


def test_missing_or_odd_data_still_gives_an_image(scene: Any, tmp_path: Path) -> None:
    frames, H, sc = scene
    # no homography, no detections: the header alone
    img = draw_stage(frames[0], StageMarks("retreat_judge"))
    assert img.shape == frames[0].shape and _changed(img, frames[0]).any()
    # a detection with no position (NaN) cannot be drawn: the raw frame is written, with a warning
    bad = BlockDetection(math.nan, math.nan, 0.0, 0.0, 0.0, 0.0, 0.025)
    raw = bytes(cv2.imencode(".jpg", frames[0])[1])
    with capture_logs() as logs:
        stage, out_raw = stage_jpegs(
            frames[0], raw, StageMarks("servo_place_servo1", None, H, block=bad)
        )
    assert stage == raw == out_raw
    failed = [e for e in logs if e["event"] == "stage_overlay_failed"]
    assert failed and failed[0]["stage"] == "servo_place_servo1"
    # an odd frame (grey, 2-D) through the eyes' writer: both files written, nothing raised
    eyes = CameraEyes.__new__(CameraEyes)
    eyes.config = DEFAULT_CONFIG
    grey = np.zeros((120, 160), np.uint8)
    with capture_logs() as logs:
        name = eyes._save_sync(tmp_path, StageCapture("odd", [grey], None, 0.0), StageMarks("odd", H=H, scene=sc))  # type: ignore[list-item]  # fmt: skip
    assert (
        name == "odd.jpg"
        and (tmp_path / name).is_file()
        and (tmp_path / STAGE_RAW / name).is_file()
    )
    assert any(e["event"] == "stage_overlay_failed" for e in logs)
    # no marks at all: the raw frame is the stage image
    name = eyes._save_sync(tmp_path, StageCapture("plain", [frames[0]], raw, 0.0), None)
    assert (tmp_path / name).read_bytes() == raw == (tmp_path / STAGE_RAW / name).read_bytes()


@pytest.mark.slow  # a whole trial through the simulator's rendered top camera
@pytest.mark.anyio
async def test_trial_leaves_overlaid_stage_images_over_the_raw_frames_perception_used(
    sim_daemon: SimDaemon, tmp_path: Path, fk_data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    used: dict[str, NDArray[np.uint8]] = {}
    handed: dict[str, NDArray[np.uint8]] = {}
    taken: dict[str, float] = {}
    grab = CameraEyes.grab

    async def recording_grab(self: CameraEyes, n: int, tag: str) -> StageCapture:
        cap = await grab(self, n, tag)
        used[tag] = cap.frames[0].copy()  # the frame perception is handed, before anything else
        handed[tag] = cap.frames[0]
        taken[tag] = cap.wall_ts
        return cap

    monkeypatch.setattr(CameraEyes, "grab", recording_grab)
    wc = Workcell(sim_daemon.arm, "random", seed=7, config=WorkcellConfig(top_fps=20))
    urls = wc.serve("127.0.0.1", 0)
    try:
        settings = trial_settings(
            tmp_path,
            fk_data_dir,
            daemon_port=sim_daemon.port,
            top_camera=urls["top"],
            release_side_check=False,
        )
        async with open_rig(settings) as (rig, _client):
            t = await run_trial(rig, scene_seed=7)
    finally:
        wc.close()
    assert t.status == "completed", t.reason
    images = sorted(p.stem for p in t.run_dir.glob("*.jpg"))
    assert images == sorted(used), "one stage image per capture"
    for name, frame in used.items():
        stage = cv2.imread(str(t.run_dir / f"{name}.jpg"))
        raw = cv2.imread(str(t.run_dir / STAGE_RAW / f"{name}.jpg"))
        assert np.array_equal(raw, frame), f"{name}: the raw image is not what perception used"
        assert np.array_equal(handed[name], frame), (
            f"{name}: the overlay drew on perception's frame"
        )
        assert _changed(stage, raw).mean() > 0.001, f"{name}: no overlay drawn"
        for f in (t.run_dir / f"{name}.jpg", t.run_dir / STAGE_RAW / f"{name}.jpg"):
            assert f.stat().st_mtime == pytest.approx(taken[name], abs=0.01), "dated at capture"
    # the Rerun builder draws its own marks on the raw frames and finds the mat again in them
    assert [p.parent.name for p in stage_images(t.run_dir)] == [STAGE_RAW] * len(used)
    H, why = find_homography(t.run_dir, {})
    assert H is not None, why
    # the detect image marks the block where the trace says detect found it
    tr = read_trace(t.trace_path)
    scene = next(e["value"] for e in tr if e.get("kind") == "scene")
    b = scene["repeats"][0]["block"]
    stage = cv2.imread(str(t.run_dir / scene["captures"][1]))
    centre = stage[round(b["v"]) - 1 : round(b["v"]) + 2, round(b["u"]) - 1 : round(b["u"]) + 2]
    assert np.abs(centre.astype(int) - COLOURS["block"]).max() < 60  # JPEG: close, not exact
    # the names the trace gives are the stage images
    for e in tr:
        v = e.get("value")
        if e.get("event") == "input" and isinstance(v, dict) and v.get("capture"):
            assert (t.run_dir / v["capture"]).is_file()
