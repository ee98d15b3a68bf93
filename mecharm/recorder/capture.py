"""The camera thread: reads the side camera, keeps the newest frame, detects loss and freezes.

``read()`` may block for as long as the device likes; only this thread waits on
it. Everyone else asks ``buffer`` (a ``mecharm.cameras.FrameBuffer`` of immutable
``CapturedFrame``) with ``read_latest(max_age_s)``, so a frame_request is answered
from memory at once (service.py); how old it may be is the shared rule of
docs/recorder.md#frame-freshness.

- Camera loss: ``camera_lost_after`` consecutive failed reads (or an exception)
  → close the source, ``buffer.lose`` (a stale frame must never be served),
  reopen after ``camera_retry_sec``, forever, until stopped.
- Frozen feed: ``FreezeWatch`` (a CRC of every 8th row) sees the same image for
  ``frozen_after_sec`` → ``frozen`` (logged; frames carry the flag).
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Callable

import cv2
import numpy as np

from mecharm.cameras.base import CameraSource
from mecharm.cameras.freshness import FrameBuffer, FreezeWatch, frame_hash
from mecharm.common.logging import get_logger
from mecharm.recorder.status import RateLimitedLog
from mecharm.recorder.writer import CapturedFrame

__all__ = ["CameraWorker", "as_bgr", "frame_hash"]

log = get_logger("mecharm.recorder.camera")


def as_bgr(image: np.ndarray) -> np.ndarray:
    """3-channel uint8 BGR, whatever the device delivered (gray, BGRA); ValueError otherwise."""
    if image.dtype != np.uint8:
        raise ValueError(f"frame dtype {image.dtype} is not uint8")
    if image.ndim == 2:
        return cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
    if image.ndim == 3 and image.shape[2] == 4:
        return cv2.cvtColor(image, cv2.COLOR_BGRA2BGR)
    if image.ndim != 3 or image.shape[2] != 3 or min(image.shape[:2]) < 2:
        raise ValueError(f"frame shape {image.shape} is not an image")
    return image


class CameraWorker:
    """Runs the read loop in a daemon thread; hands frames to ``on_frame``."""

    def __init__(
        self,
        factory: Callable[[], CameraSource],
        on_frame: Callable[[CapturedFrame], None],
        lost_after: int = 30,
        retry_sec: float = 2.0,
        frozen_after_sec: float = 2.0,
        on_lost: Callable[[str], None] | None = None,
    ) -> None:
        self._factory = factory
        self._on_frame = on_frame
        self._on_lost = on_lost
        self.lost_after = lost_after
        self.retry_sec = retry_sec
        self.buffer: FrameBuffer[CapturedFrame] = FrameBuffer()
        self._freeze = FreezeWatch(frozen_after_sec)
        self.camera: CameraSource | None = None
        self.state = "starting"  # starting | open | lost | stopped
        self.frozen = False
        self.frames = 0
        self.failed_reads = 0
        self.lost_count = 0
        self._intervals: deque[int] = deque(maxlen=120)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="camera", daemon=True)
        self._bad_frame = RateLimitedLog(log, "camera_bad_frame", per_sec=2)

    # --- control ------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 3.0) -> None:
        self._stop.set()
        self._thread.join(timeout / 2)
        cam = self.camera
        if self._thread.is_alive() and cam is not None:
            cam.close()  # unblock a read stuck in the device (synthetic/MJPEG support this)
            self._thread.join(timeout / 2)
        self.state = "stopped"

    @property
    def latest(self) -> CapturedFrame | None:
        """The newest frame, whatever its age (readers that serve it use ``buffer.read_latest``)."""
        return self.buffer.newest

    def fps(self) -> float:
        """Rate over the last ~120 frames (0 when fewer than two)."""
        iv = list(self._intervals)
        return 1e9 * len(iv) / sum(iv) if iv and sum(iv) > 0 else 0.0

    # --- the thread ---------------------------------------------------------------------------
    def _open(self) -> bool:
        try:
            cam = self._factory()
            if not cam.is_open:
                cam.open()
        except Exception as exc:
            if self.state != "lost":
                log.warning(
                    "camera_open_failed",
                    error=f"{type(exc).__name__}: {exc}",
                    retry_sec=self.retry_sec,
                )
            self.state = "lost"
            return False
        self.camera = cam
        if self.state == "lost":
            log.info("camera_recovered", source=getattr(cam, "spec", ""))
        else:
            log.info("camera_opened", source=getattr(cam, "spec", ""))
        self.state = "open"
        return True

    def _lose(self, why: str) -> None:
        self.lost_count += 1
        self.buffer.lose(why)  # forget: a stale frame is never served
        cam, self.camera = self.camera, None
        if cam is not None:
            with contextlib.suppress(Exception):
                cam.close()
        self.state = "lost"
        self.frozen = False
        log.warning("camera_lost", reason=why, retry_sec=self.retry_sec)
        if self._on_lost is not None:
            self._on_lost(why)

    def _run(self) -> None:
        failures = 0
        prev_mono: int | None = None
        while not self._stop.is_set():
            if self.camera is None:
                if not self._open():
                    self._stop.wait(self.retry_sec)
                    continue
                failures, prev_mono = 0, None
                self._freeze.reset()
            cam = self.camera
            assert cam is not None
            try:
                frame = cam.read()
                ok, image = frame.ok, frame.image
            except Exception as exc:
                if self._stop.is_set():
                    break
                self._lose(f"read raised {type(exc).__name__}: {exc}")
                self._stop.wait(self.retry_sec)
                continue
            if not ok or image is None:
                failures += 1
                self.failed_reads += 1
                if failures >= self.lost_after:
                    self._lose(f"{failures} consecutive failed reads")
                    self._stop.wait(self.retry_sec)
                continue
            failures = 0
            try:
                image = as_bgr(image)
                mono = frame.mono_ns
                change = self._freeze.update(image, mono)
                self.frozen = self._freeze.frozen
                if change == "frozen":
                    log.warning(
                        "camera_frozen", identical_for_sec=round(self._freeze.frozen_for_s, 2)
                    )
                elif change == "unfrozen":
                    log.info("camera_unfrozen", frozen_for_sec=round(self._freeze.frozen_for_s, 2))
                if prev_mono is not None:
                    self._intervals.append(mono - prev_mono)
                prev_mono = mono
                self.frames += 1
                captured = CapturedFrame(
                    image, frame.wall_ts, mono, self.frozen, self.frames, jpeg=frame.jpeg
                )
                self.buffer.put(captured, frozen=captured.frozen)
                self._on_frame(captured)
            except Exception as exc:  # a malformed image must not end the read loop
                self.failed_reads += 1
                failures += 1
                self._bad_frame(error=f"{type(exc).__name__}: {exc}")
        cam, self.camera = self.camera, None
        if cam is not None:
            with contextlib.suppress(Exception):
                cam.close()
