"""A whole trial through the rig's camera: the daemon serves the `rig` profile's optics (true
pose, lens, shadows, blur, noise, JPEG) over MJPEG and the runtime, configured with the nominal
calibration the operator would enter, detects, picks and places (docs/simulation-optics.md).

The arm is the ideal one here (a profile file with the rig's optics on the ideal base), so what
is tested is the camera chain alone: block and box found within 3 mm of the truth, a completed
trial with the block in the box."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest
import yaml

from mecharm.common.config import load_settings
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.rigsetup import open_rig
from mecharm.runtime.simcontrol import scene_next
from mecharm.runtime.trial import run_trial
from mecharm.sim.optics import OPTICS_PROFILES
from mecharm.tools.simrig import start_sim_daemon

pytestmark = pytest.mark.slow

SCALE = 20.0


def _truth(control_url: str) -> dict:
    import urllib.request

    with urllib.request.urlopen(f"{control_url}/scene/truth", timeout=10) as r:
        return json.loads(r.read())


def test_trial_through_the_rig_camera_with_the_nominal_calibration(
    tmp_path: Path, fk_data_dir: Path
) -> None:
    optics = OPTICS_PROFILES["rig"]
    profile = tmp_path / "rig_optics.yaml"
    profile.write_text(
        yaml.safe_dump({"base": "ideal", "optics": json.loads(optics.model_dump_json())}),
        encoding="utf-8",
    )
    rig = start_sim_daemon(
        tmp_path / "logs", seed=11, time_scale=SCALE, extra_args=["--sim-profile", str(profile)]
    )
    root = tmp_path / "root"
    root.mkdir()
    try:
        assert optics.top.nominal is not None
        settings = load_settings(
            RuntimeSettings,
            overrides=rig.runtime_overrides(
                root,
                SCALE,
                fk_data_dir=fk_data_dir,
                release_side_check=False,
                top_camera_calibration=optics.top.nominal.model_dump(),
            ),
        )
        scene_next(rig.control_url, 11)
        before = _truth(rig.control_url)

        async def one() -> object:
            async with open_rig(settings) as (r, _client):
                return await run_trial(r, scene_seed=11)

        summary = asyncio.run(one())
        assert summary.status == "completed", summary.reason  # type: ignore[attr-defined]
        runlog = json.loads(
            (summary.run_dir / f"{summary.run_stem}.json").read_text()  # type: ignore[attr-defined]
        )
        det = runlog["detections"][0]
        (bx, bz), (ox, oz) = det["block_xz"], det["box_xz"]
        err_block = math.hypot(bx - before["block"]["x"], bz - before["block"]["z"])
        err_box = math.hypot(ox - before["box"]["x"], oz - before["box"]["z"])
        assert err_block * 1000 <= 3.0 and err_box * 1000 <= 3.0, (err_block, err_box)
        after = _truth(rig.control_url)
        assert after["place_outcome"] == "box", after["place_outcome"]
    finally:
        rig.daemon.stop()
