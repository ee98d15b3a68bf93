"""The camera thread: reads the side camera, keeps the newest frame, detects loss and freezes.

``read()`` may block for as long as the device likes; only this thread waits on
it. Everyone else sees ``latest`` — an immutable ``CapturedFrame`` swapped in by
reference — so a frame_request is answered from memory at once (service.py).

- Camera loss: ``camera_lost_after`` consecutive failed reads (or an exception)
  → close the source, forget ``latest`` (a stale frame must never be served),
  reopen after ``camera_retry_sec``, forever, until stopped.
- Frozen feed: a CRC of every 8th row is compared with the previous frame's;
  identical for ``frozen_after_sec`` → ``frozen`` (logged; frames carry the flag).
"""

from __future__ import annotations

import contextlib
import threading
import zlib
from collections import deque
from collections.abc import Callable

import cv2
import numpy as np

from mecharm_cameras.base import CameraSource
from mecharm_common.logging import get_logger
from recorder.status import RateLimitedLog
from recorder.writer import CapturedFrame

__all__ = ["CameraWorker", "as_bgr", "frame_hash"]

log = get_logger("recorder.camera")


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


def frame_hash(image: np.ndarray) -> int:
    """Cheap content hash (every 8th row): a live sensor never repeats it; a frozen feed does."""
    return zlib.crc32(np.ascontiguousarray(image[::8]).data)


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
        self.frozen_after_ns = int(frozen_after_sec * 1e9)
        self.latest: CapturedFrame | None = None
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
                log.warning("camera_open_failed", error=f"{type(exc).__name__}: {exc}",
                            retry_sec=self.retry_sec)
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
        self.latest = None  # forget: a stale frame is never served
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
        last_hash: int | None = None
        same_since: int | None = None
        prev_mono: int | None = None
        while not self._stop.is_set():
            if self.camera is None:
                if not self._open():
                    self._stop.wait(self.retry_sec)
                    continue
                failures, last_hash, same_since, prev_mono = 0, None, None, None
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
                h = frame_hash(image)
                if h == last_hash:
                    same_since = same_since if same_since is not None else prev_mono
                    if (not self.frozen and same_since is not None
                            and mono - same_since >= self.frozen_after_ns):
                        self.frozen = True
                        log.warning("camera_frozen",
                                    identical_for_sec=round((mono - same_since) / 1e9, 2))
                else:
                    if self.frozen:
                        log.info("camera_unfrozen",
                                 frozen_for_sec=round((mono - (same_since or mono)) / 1e9, 2))
                    self.frozen = False
                    same_since = None
                last_hash = h
                if prev_mono is not None:
                    self._intervals.append(mono - prev_mono)
                prev_mono = mono
                self.frames += 1
                captured = CapturedFrame(image, frame.wall_ts, mono, self.frozen, self.frames,
                                         jpeg=frame.jpeg)
                self.latest = captured
                self._on_frame(captured)
            except Exception as exc:  # a malformed image must not end the read loop
                self.failed_reads += 1
                failures += 1
                self._bad_frame(error=f"{type(exc).__name__}: {exc}")
        cam, self.camera = self.camera, None
        if cam is not None:
            with contextlib.suppress(Exception):
                cam.close()


