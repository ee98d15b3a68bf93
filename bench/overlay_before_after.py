"""The stage's wait for its top-camera image, before and after the overlay, in whole trials.

Run this file with each checkout's code on ``PYTHONPATH`` (the one before the overlay and
this one), alternately, on the same simulated rig and scene (daemon and workcell as a
process, 20x); FK_DATA_DIR holds a built FK table (``fk/fk_table.csv``)::

    cd CHECKOUT && PYTHONPATH=$PWD python /path/to/bench/overlay_before_after.py FK_DATA_DIR 2

Before the overlay the stage awaited ``cv2.imwrite`` in a worker thread (timed here around
that call); with it, the stage awaits ``CameraEyes.save``, which hands the image to the
drawing thread (docs/stage-images.md, "What it costs"). Prints per trial: status, duration,
the waits per capture (ms), their median and total.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import cv2

try:  # the top camera's eyes moved to camera_eyes.py; older checkouts have them in eyes.py
    import mecharm.runtime.camera_eyes as eyes_mod
except ImportError:
    import mecharm.runtime.eyes as eyes_mod  # type: ignore[no-redef]
from mecharm.common.config import load_settings
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.rigsetup import open_rig
from mecharm.runtime.simcontrol import scene_next
from mecharm.runtime.trial import run_trial
from mecharm.tools.simrig import start_sim_daemon

WAITS: list[float] = []
SCALE = 20.0


def _instrument() -> str:
    if hasattr(eyes_mod, "StageCapture"):  # with the overlay: the stage awaits save()
        save = eyes_mod.CameraEyes.save

        async def timed_save(self: Any, *a: Any) -> str:
            t0 = time.perf_counter()
            try:
                return await save(self, *a)
            finally:
                WAITS.append((time.perf_counter() - t0) * 1000.0)

        eyes_mod.CameraEyes.save = timed_save  # type: ignore[method-assign]
        return "overlay"
    hop = eyes_mod.to_thread  # before: the stage awaited to_thread(cv2.imwrite, ...)

    async def timed(fn: Any, *a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return await hop(fn, *a, **k)
        finally:
            if fn is cv2.imwrite:
                WAITS.append((time.perf_counter() - t0) * 1000.0)

    eyes_mod.to_thread = timed  # type: ignore[assignment]
    return "before"


def main() -> None:
    fk, n = sys.argv[1], int(sys.argv[2])
    which = _instrument()
    tmp = Path(tempfile.mkdtemp(prefix="overlay_before_after_"))
    rig = start_sim_daemon(tmp / "logs", seed=7, time_scale=SCALE)
    root = tmp / "root"
    root.mkdir()
    try:
        s = load_settings(
            RuntimeSettings,
            overrides={"data_root": root, "fk_data_dir": fk, "daemon_port": rig.daemon_port,
                       "top_camera": rig.top_url, "recorder_enabled": False,
                       "time_scale": SCALE, "release_side_check": False,
                       "height_step_mm": 0.0, "log_level": "warning"},
        )  # fmt: skip

        async def one() -> Any:
            async with open_rig(s) as (r, _c):
                return await run_trial(r, scene_seed=7)

        for _ in range(n):
            scene_next(rig.control_url, 7)
            WAITS.clear()
            t = asyncio.run(one())
            print(
                f"{which}: {t.status} trial {t.duration_s:.2f} s, {len(WAITS)} images, wait median "
                f"{statistics.median(WAITS):.1f} ms total {sum(WAITS):.0f} ms",
                [round(w, 1) for w in WAITS],
                flush=True,
            )
    finally:
        rig.daemon.stop()


if __name__ == "__main__":
    main()
