"""OpenCV-backed sources: a device index, an RTSP/other URL, or a video file (looped).

A file plays back at its own frame rate (paced, like a camera) and starts over
at its end, so a recorded clip can stand in for the side camera. Device and
stream reads block in OpenCV; the wall/monotonic stamps are taken when
``VideoCapture.read`` returns.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import cv2

from mecharm.cameras.base import CameraNotOpenError, CameraOpenError, CameraSource, Frame

__all__ = ["OpenCVCamera", "VideoFileCamera"]


class OpenCVCamera(CameraSource):
    """cv2.VideoCapture on a device index or a stream URL (e.g. rtsp://)."""

    def __init__(
        self,
        target: int | str,
        width: int | None = None,
        height: int | None = None,
        fps: float | None = None,
        spec: str | None = None,
    ) -> None:
        self.target = target
        self.width, self.height, self.fps = width, height, fps
        self.spec = spec or str(target)
        self._cap: cv2.VideoCapture | None = None

    @property
    def is_open(self) -> bool:
        return self._cap is not None

    def _backend(self) -> int:
        if isinstance(self.target, int):
            if sys.platform.startswith("linux"):
                return int(cv2.CAP_V4L2)
            if sys.platform == "darwin":
                return int(cv2.CAP_AVFOUNDATION)
        return int(cv2.CAP_ANY)

    def open(self) -> None:
        if self._cap is not None:
            return
        cap = cv2.VideoCapture(self.target, self._backend())
        if not cap.isOpened():
            cap.release()
            raise CameraOpenError(f"{self.spec}: OpenCV could not open the source")
        if isinstance(self.target, int):
            # requests only; the reference side camera ignored the fps request (docs/recorder.md)
            if self.width:
                cap.set(cv2.CAP_PROP_FRAME_WIDTH, self.width)
            if self.height:
                cap.set(cv2.CAP_PROP_FRAME_HEIGHT, self.height)
            if self.fps:
                cap.set(cv2.CAP_PROP_FPS, self.fps)
            cap.set(cv2.CAP_PROP_BUFFERSIZE, 1)
        self._cap = cap

    def read(self) -> Frame:
        cap = self._cap
        if cap is None:
            raise CameraNotOpenError(f"{self.spec}: read() on a closed camera")
        ok, img = cap.read()
        wall, mono = time.time(), time.monotonic_ns()
        if not ok or img is None:
            return Frame(False, None, wall, mono)
        return Frame(True, img, wall, mono)

    def close(self) -> None:
        cap, self._cap = self._cap, None
        if cap is not None:
            cap.release()


class VideoFileCamera(CameraSource):
    """A video file played in a loop at its own frame rate (or ``fps``)."""

    def __init__(self, path: str | Path, fps: float | None = None) -> None:
        self.path = Path(path)
        self.spec = str(self.path)
        self.fps_override = fps
        self._cap: cv2.VideoCapture | None = None
        self._wake = threading.Event()
        self._interval = 1 / 30
        self._next = 0.0

    @property
    def is_open(self) -> bool:
        return self._cap is not None

    def open(self) -> None:
        if self._cap is not None:
            return
        if not self.path.is_file():
            raise CameraOpenError(f"{self.spec}: no such video file")
        cap = cv2.VideoCapture(str(self.path))
        if not cap.isOpened():
            cap.release()
            raise CameraOpenError(f"{self.spec}: OpenCV cannot decode this file")
        fps = self.fps_override or cap.get(cv2.CAP_PROP_FPS) or 30.0
        self._interval = 1.0 / (fps if 0 < fps <= 240 else 30.0)
        self._next = time.monotonic()
        self._wake.clear()
        self._cap = cap

    def read(self) -> Frame:
        cap = self._cap
        if cap is None:
            raise CameraNotOpenError(f"{self.spec}: read() on a closed camera")
        delay = self._next - time.monotonic()
        if delay > 0:
            self._wake.wait(delay)
        self._next = max(self._next + self._interval, time.monotonic() - self._interval)
        ok, img = cap.read()
        if not ok:  # end of file: loop
            cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
            ok, img = cap.read()
        wall, mono = time.time(), time.monotonic_ns()
        if not ok or img is None:
            return Frame(False, None, wall, mono)
        return Frame(True, img, wall, mono)

    def close(self) -> None:
        cap, self._cap = self._cap, None
        self._wake.set()
        if cap is not None:
            cap.release()
