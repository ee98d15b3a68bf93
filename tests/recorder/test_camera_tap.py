"""Camera taps (docs/top-camera.md): every frame a source obtains reaches a tap on the reader's
thread, unread frames too; a failing or slow tap never breaks or stalls the reader."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from mecharm.cameras import SyntheticCamera, open_camera
from mecharm.cameras.base import Frame
from mecharm.cameras.threaded import ThreadedCamera


def _until(cond: Any, what: str) -> None:
    """Poll for a count; the count, not the wall time, is what the test is about."""
    for _ in range(3000):
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError(f"never reached: {what}")


class Seen:
    def __init__(self) -> None:
        self.frames: list[tuple[Any, float, int, str]] = []

    def __call__(self, data: Any, wall: float, mono: int) -> None:
        self.frames.append((data, wall, mono, threading.current_thread().name))


def test_mjpeg_tap_sees_every_part_as_jpeg_bytes_without_reads(mjpeg_server: Any) -> None:
    srv = mjpeg_server(fps=60)
    with open_camera(srv.url) as cam:
        assert cam.taps_every_frame
        seen = Seen()
        cam.add_tap(seen)
        _until(lambda: len(seen.frames) >= 10, "10 frames tapped with nobody reading")
        cam.remove_tap(seen)
        n = len(seen.frames)
        parts = cam.parts_received
        _until(lambda: cam.parts_received >= parts + 3, "3 more parts")
        assert len(seen.frames) <= n + 1  # removed: at most the one being handed over
    data, wall, _mono, thread = seen.frames[0]
    assert isinstance(data, bytes) and data[:2] == b"\xff\xd8"
    assert thread.startswith("mjpeg-")  # on the reader thread, not the caller's
    monos = [f[2] for f in seen.frames]
    assert monos == sorted(monos) and abs(wall - time.time()) < 3600


def test_a_tap_that_raises_or_blocks_never_stops_the_reader(mjpeg_server: Any) -> None:
    srv = mjpeg_server(fps=60)
    calls = []

    def bad(data: Any, wall: float, mono: int) -> None:
        calls.append(mono)
        raise OSError(28, "No space left on device")

    with open_camera(srv.url) as cam:
        cam.add_tap(bad)
        _until(lambda: len(calls) >= 5, "5 calls to a tap that raises")
        f = cam.read()  # the stream is healthy: frames still come
        for _ in range(20):
            if f.ok:
                break
            f = cam.read()
        assert f.ok and cam.failure is None


def test_threaded_camera_taps_every_frame_of_a_read_on_demand_source() -> None:
    inner = SyntheticCamera(fps=50, width=64, height=48)
    assert not inner.taps_every_frame
    cam = ThreadedCamera(inner)
    seen = Seen()
    cam.add_tap(seen)
    cam.open()
    try:
        _until(lambda: len(seen.frames) >= 10, "10 frames tapped with nobody reading")
        data, _wall, _mono, thread = seen.frames[0]
        assert isinstance(data, np.ndarray) and data.shape == (48, 64, 3)
        assert thread.startswith("camera-reader")
        # read() gives the newest frame, never one it gave before, with the inner stamps
        a = cam.read()
        b = cam.read()
        assert a.ok and b.ok and b.mono_ns > a.mono_ns
        _until(lambda: any(f[2] == b.mono_ns for f in seen.frames), "the read frame tapped")
    finally:
        cam.close()
    assert not inner.is_open and not cam.is_open


def test_threaded_camera_read_fails_cleanly_when_the_source_stops() -> None:
    inner = SyntheticCamera(fps=50, width=64, height=48)
    cam = ThreadedCamera(inner, read_timeout=0.2)
    cam.open()
    assert cam.read().ok
    inner.faults.disconnect()  # every read fails
    for _ in range(5):
        f = cam.read()
    assert not f.ok
    cam.close()


class FailsAtOnce(SyntheticCamera):
    """An unplugged webcam: every read returns a failed frame at once, without raising."""

    def __init__(self) -> None:
        super().__init__(fps=50, width=64, height=48)
        self.reads = 0

    def read(self) -> Frame:
        self.reads += 1
        return Frame(False, None, time.time(), time.monotonic_ns())


def test_threaded_camera_backs_off_when_the_source_fails_at_once() -> None:
    inner = FailsAtOnce()
    cam = ThreadedCamera(inner)
    cam.open()
    try:
        time.sleep(0.5)
        reads = inner.reads
    finally:
        cam.close()
    # about 10 with a 0.05 s back-off; a reader that spins makes hundreds of thousands
    assert 1 <= reads < 100, reads


def test_remove_tap_removes_a_bound_method() -> None:
    cam = ThreadedCamera(SyntheticCamera(fps=50, width=64, height=48))
    seen = Seen()
    cam.add_tap(seen.__call__)  # a new bound-method object at each access
    cam.remove_tap(seen.__call__)
    assert cam._taps == ()
