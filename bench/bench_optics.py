"""What the sim profiles' camera optics cost per frame (docs/simulation-optics.md, "Cost").

For each profile and camera, medians over ``n`` frames in this process (one core):
render with the arm still, render while the arm moves fast (motion blur draws the arm
several times), render + JPEG at the profile's quality, and the one-off costs (the
distortion maps, the static layer of a new scene). The stream needs them under 100 ms
(top, 10 fps) and 33 ms (side, 30 fps) with both streams sharing two cores.

    python -m bench.bench_optics [--frames 20]
    python -m bench.bench_optics --images docs/img   # the figures of the document
    python -m bench.bench_optics --stream 8          # delivered fps of both streams per profile
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from bench import Row, has
from bench import median_ms as _median
from mecharm.sim.lensmaps import distortion_maps
from mecharm.sim.optics import OPTICS_PROFILES
from mecharm.sim.render import Renderer, SceneSnapshot, camera_of
from mecharm.sim.scene import SceneState, random_layout

__all__ = ["run"]

HOME = (0.0, 0.0, 0.0, 0.0, 0.0, -30.0)


def _ms(fn: Any, n: int) -> float:
    return round(_median(fn, n), 2)


def _camera(name: str, cam_name: str, n: int) -> dict[str, Any]:
    prof = OPTICS_PROFILES[name]
    optics = getattr(prof, cam_name)
    cam = camera_of(cam_name, optics)
    clock = [0.0]

    def renderer() -> tuple[Renderer, float]:
        distortion_maps.cache_clear()  # from the disk cache or worked out, not from memory
        t0 = time.perf_counter()
        r = Renderer(
            cam,
            seed=2,
            optics=None if name == "ideal" else optics,
            shadow=prof.shadow,
            clock=lambda: clock[0],
        )
        return r, (time.perf_counter() - t0) * 1000.0

    with tempfile.TemporaryDirectory() as cache:  # an empty disk cache: the first start
        saved = os.environ.get("XDG_CACHE_HOME")
        os.environ["XDG_CACHE_HOME"] = cache
        try:
            _r, setup = renderer()
            r, setup_cached = renderer()  # the next start reads what the first one kept
        finally:
            if saved is None:
                os.environ.pop("XDG_CACHE_HOME", None)
            else:
                os.environ["XDG_CACHE_HOME"] = saved
    snap = SceneSnapshot.of(SceneState(random_layout(3, prof.gain_range)))
    k = [0]

    def new_scene() -> None:  # a fresh static layer each time
        k[0] += 1
        r.render(SceneSnapshot.of(SceneState(random_layout(100 + k[0]))), HOME, 100.0)

    static = _ms(new_scene, max(3, n // 4))
    r.render(snap, HOME, 100.0)
    still = _ms(lambda: r.render(snap, HOME, 100.0), n)

    def moving() -> None:  # 200 deg/s on j0, frames 100 ms apart
        clock[0] += 0.1
        q = (20.0 * (round(clock[0] * 10) % 2), 0.0, 0.0, 0.0, 0.0, -30.0)
        r.render(snap, q, 100.0)

    blur = _ms(moving, n)
    quality = optics.jpeg_quality or 80
    jpeg = _ms(
        lambda: cv2.imencode(
            ".jpg", r.render(snap, HOME, 100.0), [cv2.IMWRITE_JPEG_QUALITY, quality]
        ),
        n,
    )
    return {
        "size": list(cam.size),
        "setup_ms (maps)": round(setup, 1),
        "setup_ms (maps from the disk cache)": round(setup_cached, 1),
        "new_scene_ms (static layer)": static,
        "render_still_ms": still,
        "render_moving_ms": blur,
        "render_plus_jpeg_ms": jpeg,
        "jpeg_quality": quality,
    }


def run(quick: bool = False, n: int | None = None) -> dict[str, Any]:
    """Render cost per profile and camera; each non-ideal figure also as a ratio to the
    ``ideal`` camera's (the renderer before lenses and effects) measured in the same run."""
    n = n or (6 if quick else 20)
    out = {
        f"{name}.{cam_name}": _camera(name, cam_name, n)
        for name in OPTICS_PROFILES
        for cam_name in ("top", "side")
    }
    for key, fig in out.items():
        base = out[f"ideal.{key.split('.')[1]}"]
        for k in ("render_still_ms", "render_moving_ms", "render_plus_jpeg_ms"):
            fig[f"{k.removesuffix('_ms')}_x_ideal"] = round(fig[k] / max(base[k], 1e-6), 2)
    return out


#: the rig's logged top-camera pixels of the block and the box (docs/simulation-optics.md)
RIG_PIXELS = {"block": (632, 746), "box": (1404, 594)}
RIG_XZ = {"block": (0.1964, 0.2540), "box": (-0.198, 0.178)}
PICK = (-31.93, 87.74, -38.33, 18.6, -45.11, -30.0)


def images(out_dir: Path) -> list[Path]:
    """optics_<profile>_top.png / _side.png: the block and the box where the rig's log saw
    them, the arm at the pick descend over the block; on the top view, the rig's logged
    pixels as yellow crosses (they should sit on the block's and the box's centres)."""
    from mecharm.sim.profile import load_profile
    from mecharm.sim.scene import Lighting, Pose, SceneLayout
    from mecharm.sim.workcell import Workcell
    from mecharm_dev.handheld import exact_arm

    written = []
    for name, gain in (("rig", 1.0), ("harsh", 0.82)):
        arm = exact_arm()
        wc = Workcell(arm, "random", 0, profile=load_profile(name))
        try:
            wc.next_scene(
                layout=SceneLayout(
                    block=Pose(x=RIG_XZ["block"][0], z=RIG_XZ["block"][1], yaw_deg=20.0),
                    box=Pose(x=RIG_XZ["box"][0], z=RIG_XZ["box"][1], yaw_deg=8.0),
                    lighting=Lighting(gain=gain, gradient=(0.04, -0.03)),
                )
            )
            if arm.send_angles(list(PICK), 100) != 1 or not arm.wait_idle(timeout=10):
                raise RuntimeError("simulated arm did not reach the pick pose")
            for cam in ("top", "side"):
                img = cv2.imdecode(np.frombuffer(wc.jpeg(cam), np.uint8), cv2.IMREAD_COLOR)
                if cam == "top":
                    for label, (u, v) in RIG_PIXELS.items():
                        cv2.drawMarker(img, (u, v), (0, 230, 255), cv2.MARKER_CROSS, 40, 3)
                        cv2.putText(
                            img, f"rig log: {label} ({u}, {v})", (u + 24, v - 24),
                            cv2.FONT_HERSHEY_SIMPLEX, 1.0, (0, 230, 255), 2, cv2.LINE_AA,
                        )  # fmt: skip
                small = cv2.resize(img, (img.shape[1] // 2, img.shape[0] // 2), cv2.INTER_AREA)
                path = out_dir / f"optics_{name}_{cam}.png"
                cv2.imwrite(str(path), small, [cv2.IMWRITE_PNG_COMPRESSION, 9])
                written.append(path)
        finally:
            wc.close()
    return written


def stream(seconds: float) -> dict[str, Any]:
    """Both MJPEG streams read at once for ``seconds`` per profile (the server renders and
    encodes, two readers decode, all in this process): delivered fps vs requested."""
    import threading

    from mecharm.cameras import open_camera
    from mecharm.sim.arm import SimArm
    from mecharm.sim.profile import load_profile
    from mecharm.sim.workcell import start_workcell

    out: dict[str, Any] = {}
    for name in OPTICS_PROFILES:
        wc = start_workcell(SimArm(), "random", 1, camera_port=0, profile=load_profile(name))
        counts: dict[str, float] = {}

        def reader(
            cam_name: str, urls: dict[str, str] = wc.urls, counts: dict[str, float] = counts
        ) -> None:
            cam = open_camera(urls[cam_name])
            try:
                cam.read()  # the first frame includes the producer's start-up
                t0, n = time.monotonic(), 0
                while time.monotonic() - t0 < seconds:
                    n += bool(cam.read().ok)
                counts[cam_name] = round(n / (time.monotonic() - t0), 2)
            finally:
                cam.close()

        threads = [threading.Thread(target=reader, args=(c,)) for c in ("top", "side")]
        cpu0, w0 = time.process_time(), time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        cpu = (time.process_time() - cpu0) / max(1e-9, time.monotonic() - w0)
        wc.close()
        out[name] = {
            "top_fps (10 requested)": counts.get("top"),
            "side_fps (30 requested)": counts.get("side"),
            "cpu_share_of_one_core": round(cpu, 2),
        }
    return out


#: what each stream can spend on a frame: top at 10 fps, side at 30 fps (module docstring)
FRAME_BUDGET_MS = {"top": 100, "side": 33}


def rows(result: dict[str, Any]) -> list[Row]:
    """The table's lines: render + JPEG per frame for each profile's cameras, against the
    ideal profile (no optics) in the same run."""
    out = []
    for profile in ("rig", "harsh"):
        for cam, budget in FRAME_BUDGET_MS.items():
            got, ideal = result.get(f"{profile}.{cam}"), result.get(f"ideal.{cam}")
            if not got or not ideal or not has(got, "render_plus_jpeg_ms", "render_moving_ms"):
                continue
            out.append(
                Row(
                    "sim optics",
                    f"`{profile}` profile, {cam} camera: render + JPEG (render while moving)",
                    f"{got['render_plus_jpeg_ms']} ms ({got['render_moving_ms']} ms)",
                    f"<= {budget} ms per frame",
                    f"`ideal` profile {ideal.get('render_plus_jpeg_ms', '?')} ms "
                    f"({ideal.get('render_moving_ms', '?')} ms)",
                )
            )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.bench_optics", description=__doc__)
    ap.add_argument("--frames", type=int, default=20)
    ap.add_argument("--images", type=Path, metavar="DIR", help="instead: write the figures")
    ap.add_argument("--stream", type=float, metavar="S", help="instead: stream fps, S seconds")
    a = ap.parse_args(argv)
    if a.stream is not None:
        print(json.dumps(stream(a.stream), indent=1))
        return 0
    if a.images is not None:
        for p in images(a.images):
            print(p)
        return 0
    print(json.dumps(run(n=a.frames), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
