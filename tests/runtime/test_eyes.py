"""The runtime's eyes take only frames fresh for the capture request (docs/recorder.md#frame-freshness).

The top camera is the simulator's real MJPEG server on loopback, streaming
numbered frames, so a test can tell which frame the eyes used.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import cv2
import numpy as np
import pytest

from mecharm.cameras import CameraSource, Frame, MjpegHttpCamera, open_camera
from mecharm.runtime.camera_eyes import CameraEyes, EyesError
from mecharm.runtime.eyes import TracedEyes
from mecharm.runtime.perception.judge import GeometricJudge, HumanJudge
from mecharm.runtime.perception.results import Verdict
from mecharm.runtime.ports import VerdictObservation
from mecharm.runtime.records.trace import TraceWriter
from mecharm.sim.camserver import CameraFeed, CameraServer

H, W = 48, 256


def _numbered() -> Any:
    n = iter(range(1 << 16))

    def produce() -> bytes:
        k, img = next(n), np.zeros((H, W, 3), np.uint8)
        for bit in range(16):  # the frame number as 16 black/white squares (survives JPEG)
            img[:, bit * 16 : bit * 16 + 16] = 255 if (k >> bit) & 1 else 0
        return bytes(cv2.imencode(".jpg", img)[1])

    return produce


def _number(img: np.ndarray) -> int:
    return sum(
        1 << bit
        for bit in range(16)
        if img[H // 2 - 4 : H // 2 + 4, bit * 16 + 4 : bit * 16 + 12].mean() > 127
    )


@pytest.fixture
def top_camera() -> Iterator[MjpegHttpCamera]:
    server = CameraServer(
        ("127.0.0.1", 0),
        {"top": CameraFeed("top", _numbered(), fps=20)},
        truth=dict,
        next_scene=lambda _seed: {},
    )
    server.serve_in_thread()
    cam = open_camera(f"http://127.0.0.1:{server.port}/top.mjpg")
    assert isinstance(cam, MjpegHttpCamera)
    try:
        yield cam
    finally:
        cam.close()
        server.close()


def test_eyes_skip_a_streamed_frame_captured_before_the_request(
    top_camera: MjpegHttpCamera,
) -> None:
    cam = top_camera
    eyes = CameraEyes(cam, flush_frames=0)  # freshness alone, without the first-frame flush
    assert cam.read().ok
    seen = cam.parts_received
    while cam.parts_received < seen + 2:  # newer frames arrive and wait in the reader, unread
        threading.Event().wait(0.01)
    latest = cam._latest  # peek at the reader's newest part without consuming it
    assert latest is not None
    waiting = _number(cv2.imdecode(np.frombuffer(latest[0], np.uint8), cv2.IMREAD_COLOR))
    numbers = [_number(f) for f in eyes._grab_sync(2)]
    assert numbers[0] > waiting and numbers[1] > numbers[0], (waiting, numbers)


class _BufferedDevice(CameraSource):
    """A device that keeps handing over one frame stamped long ago (a stuck driver buffer)."""

    spec = "buffered-device"

    def __init__(self, stamp_ns: int) -> None:
        self.stamp_ns, self._open = stamp_ns, False

    def open(self) -> None:
        self._open = True

    def read(self) -> Frame:
        return Frame(True, np.zeros((8, 8, 3), np.uint8), 0.0, self.stamp_ns)

    def close(self) -> None:
        self._open = False

    @property
    def is_open(self) -> bool:
        return self._open


def test_eyes_give_up_on_a_feed_that_stays_stale_and_say_why() -> None:
    eyes = CameraEyes(_BufferedDevice(stamp_ns=1), max_failed_reads=5)
    with pytest.raises(EyesError, match=r"5 frames captured before the request \(max age 0 s\)"):
        eyes._grab_sync(1)
    obs = asyncio.run(eyes.observe_scene("s2"))
    assert (
        not obs.ok and "captured before the request" in obs.reason
    )  # the stage gets a reason, no crash


def _served(produce: Any) -> tuple[CameraServer, MjpegHttpCamera]:
    server = CameraServer(
        ("127.0.0.1", 0),
        {"top": CameraFeed("top", produce, fps=40)},
        truth=dict,
        next_scene=lambda _seed: {},
    )
    server.serve_in_thread()
    cam = open_camera(f"http://127.0.0.1:{server.port}/top.mjpg")
    assert isinstance(cam, MjpegHttpCamera)
    return server, cam


def test_a_frozen_feed_stops_the_capture_naming_it() -> None:
    """The stream goes on with ok frames and fresh timestamps, but the picture is the same
    JPEG every time (docs/perception.md, "Frozen feed")."""
    live = _numbered()
    first: list[bytes] = []

    def produce() -> bytes:
        if len(first) < 4:
            first.append(live())
        return first[-1]  # live for 4 frames, then the 4th forever

    server, cam = _served(produce)
    eyes = CameraEyes(cam, frozen_frames=5)
    try:
        with pytest.raises(EyesError, match=r"feed frozen: 5 identical frames in a row"):
            eyes._grab_sync(20)
        with pytest.raises(EyesError, match="feed frozen"):  # a short capture cannot hide it
            eyes._grab_sync(2)
        eyes.frozen_frames = 0  # the check off: the stale frames are taken as they come
        assert len(eyes._grab_sync(3)) == 3
    finally:
        cam.close()
        server.close()


def test_a_few_repeated_frames_are_skipped_not_taken_for_a_frozen_feed() -> None:
    live = _numbered()
    last: list[bytes] = []

    def produce() -> bytes:  # every picture sent three times (a slow camera behind a fast stream)
        if len(last) % 3 == 0:
            last.append(live())
        else:
            last.append(last[-1])
        return last[-1]

    server, cam = _served(produce)
    eyes = CameraEyes(cam, frozen_frames=5, flush_frames=0)
    try:
        numbers = [_number(f) for f in eyes._grab_sync(4)]
    finally:
        cam.close()
        server.close()
    assert len(set(numbers)) == 4, numbers  # four different pictures, no repeat among them


def test_a_look_during_a_task_is_the_geometric_judge_s_whatever_judges_the_trial() -> None:
    """``look_place`` (a rollout's look after the policy lets go) never spends a call of the
    trial's own judge (a VLM's budget, the operator's attention): the trial's geometric
    judge, else the one it falls back to, else one of the eyes' own; ``judge_place`` (the
    trial's verdict) is the trial's judge's."""

    class Counting(GeometricJudge):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name, self.calls = name, 0

        async def judge_place(self, evidence: Any) -> Verdict:
            self.calls += 1
            return Verdict("no", 0.5, "counted", self.name)

    geometric = Counting("geometric")
    vlm = HumanJudge(timeout=1.0, fallback=geometric)  # a judge of the trial's with a fallback
    asked: list[str] = []

    async def judge_place(evidence: Any) -> Verdict:  # the trial's own judge: counted
        asked.append("trial")
        return Verdict("yes", 0.9, "asked", "vlm")

    vlm.judge_place = judge_place  # type: ignore[method-assign]
    eyes = CameraEyes(_BufferedDevice(stamp_ns=1), vlm)

    async def evidence(tag: str, tip: Any, side: Any) -> Any:
        return object(), object()

    async def judged(what: str, found: Any, v: Any) -> None:
        return None

    eyes._evidence = evidence  # type: ignore[method-assign]
    eyes._judged = judged  # type: ignore[method-assign]
    try:
        looked = asyncio.run(eyes.look_place("rollout_look_1"))
        assert looked.judge == "geometric" and geometric.calls == 1 and asked == []
        assert asyncio.run(eyes.judge_place(None, "rollout_judge")).judge == "vlm"
        assert asked == ["trial"] and geometric.calls == 1
        for judge in (Counting("geometric"), HumanJudge(timeout=1.0)):
            other = CameraEyes(_BufferedDevice(stamp_ns=1), judge)
            try:
                got = other._look_judge()
                assert isinstance(got, GeometricJudge) and (got is judge or judge.name == "human")
            finally:
                other._drawer.shutdown(wait=True)
    finally:
        eyes._drawer.shutdown(wait=True)


def test_a_traced_look_is_an_input_of_its_own_kind_not_the_place_verdict() -> None:
    """What the records fold as the trial's place verdict is ``place_verdict``; a look is
    ``look_verdict``, so a look never becomes the trial's verdict."""

    class Inner:
        async def look_place(self, tag: str) -> VerdictObservation:
            return VerdictObservation("yes", 0.9, "looked", "geometric")

        async def judge_place(self, side_frame: str | None, tag: str) -> VerdictObservation:
            return VerdictObservation("no", 0.9, "judged", "geometric")

    trace = TraceWriter(None)
    eyes = TracedEyes(Inner(), trace)  # type: ignore[arg-type]
    asyncio.run(eyes.look_place("rollout_look_1"))
    asyncio.run(eyes.judge_place(None, "rollout_judge"))
    got = [(e["kind"], e["value"]["verdict"]) for e in trace.lines if e["event"] == "input"]
    assert got == [("look_verdict", "yes"), ("place_verdict", "no")]
