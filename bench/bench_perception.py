"""Perception and simulated-camera benchmark.

Figures (each with its target and a baseline measured in the same run):
- top-camera detection time per 1920x1080 frame (block and box from one capture,
  i.e. ``detect_scene`` over one frame, the detect work per capture; target <= 30 ms); baseline: decoding the same frame
  from JPEG, the unavoidable cost of receiving it;
- mat homography (ArUco corners) per frame, same baseline;
- simulated camera cost per frame (render + JPEG encode) for top and side;
  baseline: the JPEG encode alone;
- the MJPEG stream's delivered fps vs requested, top (10 fps) and side (30 fps)
  streamed at the same time through ``mecharm_cameras.open_camera`` (the CPU
  share covers the server's rendering and encoding plus both readers' decoding,
  all in this process).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import cv2

from bench import median_ms
from mecharm_cameras import open_camera
from mecharm_runtime.perception import detect_block, detect_box, detect_scene, estimate_homography
from mecharm_sim.arm import SimArm
from mecharm_sim.render import SIDE_CAMERA, TOP_CAMERA, Renderer, SceneSnapshot
from mecharm_sim.scene import SceneState, random_layout
from mecharm_sim.workcell import WorkcellConfig, start_workcell

__all__ = ["run"]

HOME = (0.0, 0.0, 0.0, 0.0, 0.0, -30.0)
TARGET_DETECT_MS = 30.0


def _perception(n: int) -> dict[str, Any]:
    r = Renderer(TOP_CAMERA, 1)
    frames = []
    for seed in range(n):
        snap = SceneSnapshot.of(SceneState(random_layout(seed)))
        frames.append(r.render(snap, HOME, 100.0))
    H = estimate_homography(frames[:1])
    jpegs = [cv2.imencode(".jpg", f, [cv2.IMWRITE_JPEG_QUALITY, 80])[1] for f in frames]
    it = iter(range(10**9))

    def pick(seq: list[Any]) -> Any:
        return seq[next(it) % len(seq)]

    decode = median_ms(lambda: cv2.imdecode(pick(jpegs), cv2.IMREAD_COLOR), 3 * n)
    detect = median_ms(lambda: detect_scene([pick(frames)], H), 3 * n)
    separate = median_ms(
        lambda: (lambda f: (detect_block(f, H), detect_box(f, H)))(pick(frames)), 3 * n
    )
    homog = median_ms(lambda: estimate_homography([pick(frames)]), n)
    return {
        "detect_ms_per_frame_1080p": round(detect, 2),
        "detect_target_ms": TARGET_DETECT_MS,
        "detect_target_met": detect <= TARGET_DETECT_MS,
        "detect_block_plus_detect_box_separately_ms": round(separate, 2),
        "baseline_jpeg_decode_ms_1080p": round(decode, 2),
        "detect_vs_decode_ratio": round(detect / decode, 2),
        "homography_ms_per_frame": round(homog, 2),
        "homography_vs_decode_ratio": round(homog / decode, 2),
    }


def _camera_cost(n: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    snap = SceneSnapshot.of(SceneState(random_layout(3)))
    for cam in (TOP_CAMERA, SIDE_CAMERA):
        r = Renderer(cam, 2)
        frame = r.render(snap, HOME, 100.0)  # builds the static layer and noise once
        enc = median_ms(lambda f=frame: cv2.imencode(".jpg", f, [cv2.IMWRITE_JPEG_QUALITY, 80]), n)
        both = median_ms(
            lambda r=r: cv2.imencode(
                ".jpg", r.render(snap, HOME, 100.0), [cv2.IMWRITE_JPEG_QUALITY, 80]
            ),
            n,
        )
        out[f"{cam.name}_render_plus_jpeg_ms"] = round(both, 2)
        out[f"{cam.name}_baseline_jpeg_only_ms"] = round(enc, 2)
        out[f"{cam.name}_render_plus_jpeg_vs_jpeg_ratio"] = round(both / enc, 2)
    return out


def _stream(seconds: float) -> dict[str, Any]:
    cfg = WorkcellConfig()
    wc = start_workcell(SimArm(), "random", seed=1, camera_port=0, config=cfg)
    counts: dict[str, int] = {}
    spans: dict[str, float] = {}
    errors: list[str] = []

    def reader(name: str) -> None:
        try:
            cam = open_camera(wc.urls[name])
        except Exception as exc:
            errors.append(f"{name}: {exc}")
            return
        try:
            cam.read()  # the first frame includes the producer's start-up
            t0 = time.monotonic()
            n = 0
            while time.monotonic() - t0 < seconds:
                if cam.read().ok:
                    n += 1
            counts[name], spans[name] = n, time.monotonic() - t0
        finally:
            cam.close()

    threads = [threading.Thread(target=reader, args=(n,)) for n in ("top", "side")]
    cpu0 = time.process_time()
    w0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cpu = (time.process_time() - cpu0) / max(1e-9, time.monotonic() - w0)
    wc.close()
    out: dict[str, Any] = {
        "stream_seconds": seconds,
        "stream_errors": errors,
        "stream_cpu_share_of_one_core": round(cpu, 2),
    }
    for name, req in (("top", cfg.top_fps), ("side", cfg.side_fps)):
        if name in counts:
            fps = counts[name] / spans[name]
            out[f"{name}_fps_requested"] = req
            out[f"{name}_fps_delivered"] = round(fps, 2)
            out[f"{name}_delivered_vs_requested_ratio"] = round(fps / req, 3)
    return out


def run(quick: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "mode": "quick" if quick else "full",
        "cpus": os.cpu_count(),
        "loadavg_1m_at_start": round(os.getloadavg()[0], 2),
    }
    out.update(_perception(8 if quick else 30))
    out.update(_camera_cost(10 if quick else 40))
    out.update(_stream(3.0 if quick else 10.0))
    return out


if __name__ == "__main__":
    for k, v in run(quick=True).items():
        print(f"{k}: {v}")
