"""The place judge on frames the runtime saved in harsh runs (tests/sim/perception/data):
blocks upright on the box floor whose top face read 48-51 mm — over the old midpoint of
floor and rim — and whose location on the rim's plane reached over the wall. The size
now says "rim" only within RIM_SIZE_BELOW_MM of the rim's block height (docs/perception.md,
"Judges that know the height")."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from mecharm_runtime.perception import judge as J
from mecharm_runtime.perception.config import CameraCalibration, PerceptionConfig
from mecharm_runtime.perception.detect import detect_scene
from mecharm_runtime.perception.homography import estimate_homography

DATA = Path(__file__).parent / "data"
CASES = ["harsh_9814", "harsh_9324"]


def _evidence(name: str) -> tuple[J.JudgeEvidence, PerceptionConfig]:
    d = DATA / name
    meta = json.loads((d / "meta.json").read_text())
    cfg = PerceptionConfig(top_camera=CameraCalibration(**meta["top_camera_calibration"]))

    def img(f: str) -> np.ndarray:
        a = cv2.imread(str(d / f))
        assert a is not None, f
        return np.asarray(a, dtype=np.uint8)

    H = estimate_homography([img("mat.jpg")], cfg)
    scene = detect_scene([img("detect.jpg")], H, config=cfg)
    return J.JudgeEvidence(frames=[img("place_judge.jpg")], H=H, scene=scene), cfg


@pytest.mark.parametrize("name", CASES)
def test_a_block_on_the_floor_read_between_the_midpoint_and_the_rim_is_placed(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ev, cfg = _evidence(name)
    v = asyncio.run(J.GeometricJudge(cfg).judge_place(ev))
    (f,) = v.details["frames"]
    assert 48.0 <= f["top_height_mm"] < 60.0, f  # over the old midpoint, under the new bound
    assert f["red_on_rim_mm2"] < 40.0 and f["rests_on"] == "floor"
    assert v.verdict == "yes", v.reason
    # the rule before (the midpoint, 48 mm): the same frame was judged on the rim
    monkeypatch.setattr(J, "RIM_SIZE_BELOW_MM", 20.0)
    old = asyncio.run(J.GeometricJudge(cfg).judge_place(ev))
    assert old.verdict == "no" and old.details["frames"][0]["rests_on"] == "rim"
    assert old.details["frames"][0]["rim_plane_margin_mm"] < J.RIM_SLACK_MM
