"""The detect stage and the eyes with a box detection that doubts itself: the eyes detect again
on fresh captures, then the trial stops with the doubt (docs/perception.md,
"Detections that doubt themselves"). The camera is the simulator's real MJPEG server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from mecharm.cameras import open_camera
from mecharm.runtime import engine
from mecharm.runtime.camera_eyes import CameraEyes
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.pick_place import context, pick
from mecharm.runtime.ports import SceneObservation
from mecharm.sim.arm import SimArm, SimArmConfig
from mecharm.sim.workcell import Workcell, WorkcellConfig


@pytest.fixture
def workcell() -> Iterator[Workcell]:
    arm = SimArm(SimArmConfig(time_scale=50, read_latency_s=0, write_latency_s=0))
    wc = Workcell(arm, "random", seed=4, config=WorkcellConfig(top_fps=20))
    wc.serve("127.0.0.1", 0)
    try:
        yield wc
    finally:
        wc.close()


def _observe(wc: Workcell) -> SceneObservation:
    eyes = CameraEyes(
        open_camera(wc.urls["top"]), homography_frames=3, detect_repeat=2, detect_retries=2
    )
    try:
        return asyncio.run(eyes.observe_scene("detect_attempt1"))
    finally:
        asyncio.run(eyes.close())


def test_trusted_box_is_detected_once(workcell: Workcell) -> None:
    obs = _observe(workcell)
    assert obs.ok and obs.box_trusted and obs.box_doubt == ""
    assert len(obs.repeats) == 1
    assert "box_trusted" not in obs.to_dict()  # traces from before the flag look the same


def test_untrusted_box_is_detected_again_then_reported(workcell: Workcell) -> None:
    with workcell.scene.lock:  # the operator took the box away
        workcell.scene.box = (5.0, 5.0, 0.0)
        workcell.scene.bump()
    obs = _observe(workcell)
    assert obs.ok and obs.block_xz is not None  # the block is there
    assert not obs.box_trusted and obs.box_method == "fallback"
    assert len(obs.repeats) == 3  # first detect + 2 retries, each on fresh captures
    assert obs.box_doubt.startswith("box detection not trusted in 3 detects")
    back = SceneObservation.from_dict(obs.to_dict())
    assert not back.box_trusted and back.box_doubt == obs.box_doubt


class _Trace:
    def __init__(self) -> None:
        self.decisions: list[tuple[str, Any]] = []

    def decision(self, kind: str, value: Any) -> None:
        self.decisions.append((kind, value))


class _Eyes:
    def __init__(self, obs: SceneObservation) -> None:
        self.obs = obs

    async def observe_scene(self, tag: str) -> SceneObservation:
        return self.obs


def _ctx(obs: SceneObservation, **settings: Any) -> SimpleNamespace:
    return SimpleNamespace(
        settings=RuntimeSettings(**settings),
        eyes=_Eyes(obs),
        state=context.TrialState(),
        stage="detect",
        trace=_Trace(),
    )


DOUBTFUL = SceneObservation(
    True,
    block_xz=(0.2, 0.25),
    box_xz=(-0.01, 0.108),
    box_score=0.2,
    box_method="fallback",
    box_trusted=False,
    box_doubt="box detection not trusted in 3 detects: box not found",
)


def test_detect_stops_on_an_untrusted_box() -> None:
    ctx = _ctx(DOUBTFUL)
    with pytest.raises(engine.StageFailed, match="box detection not trusted in 3 detects"):
        asyncio.run(pick.detect(ctx))  # type: ignore[arg-type]
    assert ctx.trace.decisions == [
        ("box_untrusted", {"doubt": DOUBTFUL.box_doubt, "proceed": False})
    ]
    assert ctx.state.scene is None


def test_old_trace_scene_reads_as_trusted_and_makes_no_decision() -> None:
    old = {"ok": True, "block_xz": [0.2, 0.25], "box_xz": [-0.2, 0.2], "box_method": "contour"}
    obs = SceneObservation.from_dict(old)
    assert obs.box_trusted
    ctx = _ctx(obs)
    assert asyncio.run(pick.detect(ctx)) == engine.Outcome.OK  # type: ignore[arg-type]
    assert ctx.trace.decisions == []
