"""``ThreadedCamera``: a read-on-demand source read continuously on its own thread.

A USB webcam (``OpenCVCamera``), a video file or the synthetic source obtain a frame only
when ``read()`` is called, so between two stage captures nobody would see the scene. This
wrapper reads the inner source in a loop on a reader thread, hands every frame to the taps
there and keeps only the newest; ``read()`` waits for a frame newer than the last one it
returned, exactly as ``MjpegHttpCamera`` does, so a consumer sees the same one-frame latency
and freshness stamps (taken by the inner source when it obtained the frame). Used by the
runtime when it records the top camera (docs/top-camera.md).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from mecharm.cameras.base import CameraNotOpenError, CameraSource, Frame

__all__ = ["ThreadedCamera"]

#: the pause after a failed read: a source that fails at once must not spin a core
FAIL_PAUSE_S = 0.05


class ThreadedCamera(CameraSource):
    """Newest-frame reader thread around ``inner`` (which it opens and closes)."""

    taps_every_frame = True

    def __init__(self, inner: CameraSource, read_timeout: float = 2.0) -> None:
        self.inner = inner
        self.spec = inner.spec
        self.read_timeout = read_timeout
        self._cond = threading.Condition()
        self._latest: Frame | None = None
        self._seq = self._read_seq = 0
        self._thread: threading.Thread | None = None
        self._running = False
        self.frames_read = 0

    @property
    def is_open(self) -> bool:
        return self._running

    def open(self) -> None:
        if self._running:
            return
        if not self.inner.is_open:
            self.inner.open()
        self._latest, self._seq, self._read_seq = None, 0, 0
        self._running = True
        self._thread = threading.Thread(
            target=self._reader, name=f"camera-reader-{self.spec}"[:40], daemon=True
        )
        self._thread.start()

    def _reader(self) -> None:
        while self._running:
            try:
                f = self.inner.read()
            except Exception:  # closed under us (close() below) or a broken source
                f = Frame(False, None, time.time(), time.monotonic_ns())
                if not self._running:
                    break
            with self._cond:
                self._latest = f
                self._seq += 1
                self.frames_read += 1
                self._cond.notify_all()
            if f.ok and self._taps:
                self._tap(f.jpeg if f.jpeg is not None else f.image, f.wall_ts, f.mono_ns)
            elif not f.ok and self._running:
                # a source that fails at once, raising or not (an unplugged webcam returns
                # ok=False immediately), must not spin a core
                time.sleep(FAIL_PAUSE_S)

    def newest(self) -> tuple[Any, float, int] | None:
        with self._cond:
            f = self._latest
        if f is None or not f.ok:
            return None
        return (f.jpeg if f.jpeg is not None else f.image, f.wall_ts, f.mono_ns)

    def read(self) -> Frame:
        if not self._running:
            raise CameraNotOpenError(f"{self.spec}: read() on a closed camera")
        deadline = time.monotonic() + self.read_timeout
        with self._cond:
            while self._seq == self._read_seq and self._running:
                left = deadline - time.monotonic()
                if left <= 0:
                    return Frame(False, None, time.time(), time.monotonic_ns())
                self._cond.wait(left)
            if self._seq == self._read_seq or self._latest is None:
                return Frame(False, None, time.time(), time.monotonic_ns())
            self._read_seq = self._seq
            return self._latest

    def close(self) -> None:
        self._running = False
        with self._cond:
            self._cond.notify_all()
        thread, self._thread = self._thread, None
        # the reader's read in progress ends first: releasing an OpenCV capture under a read
        # on another thread is not safe in every backend; a read stuck longer than that is
        # unblocked by closing the source where it can be
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)
        self.inner.close()
        if thread is not None and thread.is_alive():
            thread.join(timeout=2.0)
