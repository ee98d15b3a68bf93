"""What the sim profiles' camera optics cost per frame (docs/simulation-optics.md, "Cost").

For each profile and camera, medians over ``n`` frames in this process (one core):
render with the arm still, render while the arm moves fast (motion blur draws the arm
several times), render + JPEG at the profile's quality, and the one-off costs (the
distortion maps, the static layer of a new scene). The stream needs them under 100 ms
(top, 10 fps) and 33 ms (side, 30 fps) with both streams sharing two cores.

    python -m bench.bench_optics [--frames 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import cv2

from mecharm_sim.optics import OPTICS_PROFILES
from mecharm_sim.render import Renderer, SceneSnapshot, _distortion_maps, camera_of
from mecharm_sim.scene import SceneState, random_layout

__all__ = ["run"]

HOME = (0.0, 0.0, 0.0, 0.0, 0.0, -30.0)


def _median_ms(fn: Any, n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000.0)
    return round(statistics.median(times), 2)


def run(n: int = 20) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, prof in OPTICS_PROFILES.items():
        for cam_name in ("top", "side"):
            optics = getattr(prof, cam_name)
            cam = camera_of(cam_name, optics)
            _distortion_maps.cache_clear()
            t0 = time.perf_counter()
            ideal = name == "ideal"
            clock = [0.0]
            r = Renderer(
                cam,
                seed=2,
                optics=None if ideal else optics,
                shadow=prof.shadow,
                clock=lambda: clock[0],
            )
            setup = (time.perf_counter() - t0) * 1000.0
            snap = SceneSnapshot.of(SceneState(random_layout(3, prof.gain_range)))
            r.render(snap, HOME, 100.0)
            k = [0]

            def new_scene() -> None:  # a fresh static layer each time
                k[0] += 1
                r.render(SceneSnapshot.of(SceneState(random_layout(100 + k[0]))), HOME, 100.0)

            static = _median_ms(new_scene, max(3, n // 4))
            r.render(snap, HOME, 100.0)
            still = _median_ms(lambda: r.render(snap, HOME, 100.0), n)

            def moving() -> None:  # 200 deg/s on j0, frames 100 ms apart
                clock[0] += 0.1
                q = (20.0 * (round(clock[0] * 10) % 2), 0.0, 0.0, 0.0, 0.0, -30.0)
                r.render(snap, q, 100.0)

            blur = _median_ms(moving, n)
            q = optics.jpeg_quality or 80
            jpeg = _median_ms(
                lambda: cv2.imencode(
                    ".jpg", r.render(snap, HOME, 100.0), [cv2.IMWRITE_JPEG_QUALITY, q]
                ),
                n,
            )
            out[f"{name}.{cam_name}"] = {
                "size": list(cam.size),
                "setup_ms (maps)": round(setup, 1),
                "new_scene_ms (static layer)": static,
                "render_still_ms": still,
                "render_moving_ms": blur,
                "render_plus_jpeg_ms": jpeg,
                "jpeg_quality": q,
            }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.bench_optics", description=__doc__)
    ap.add_argument("--frames", type=int, default=20)
    a = ap.parse_args(argv)
    print(json.dumps(run(a.frames), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
