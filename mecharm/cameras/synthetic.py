"""Synthetic camera: 1280x720 test frames at a paced rate, with fault injection.

The default source for the demo and the tests. Each frame shows a large frame
counter and the capture timestamp (so a decoded video can be checked by eye)
and a moving bar (so the encoder sees motion). ``SyntheticFaults`` lets a test
make the camera stall, fail reads, disconnect (reads fail and open() is
refused) or freeze (the same image keeps coming with ok=True, like a virtual
phone camera whose app has quit, docs/recorder.md). Faults are also reachable by the
source's ``id`` through ``synthetic_faults(id)`` and settable from the spec
string (``synthetic?fps=30&freeze_after=2``) for a recorder in a subprocess.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import ClassVar

import cv2
import numpy as np
from numpy.typing import NDArray

from mecharm.cameras.base import CameraNotOpenError, CameraOpenError, CameraSource, Frame

__all__ = ["SyntheticCamera", "SyntheticFaults", "synthetic_faults"]


@dataclass
class SyntheticFaults:
    """Thread-safe fault switches; a test flips them while the recorder reads."""

    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    stall_sec: float = 0.0
    fail_reads: int = 0
    disconnected: bool = False
    frozen: bool = False

    def stall(self, seconds: float) -> None:
        """The next read() blocks this long before delivering."""
        with self._lock:
            self.stall_sec = max(0.0, float(seconds))

    def fail_next(self, n: int) -> None:
        """The next n reads return ok=False (camera stays open)."""
        with self._lock:
            self.fail_reads = max(0, int(n))

    def disconnect(self) -> None:
        """Every read fails and open() is refused until reconnect()."""
        with self._lock:
            self.disconnected = True

    def reconnect(self) -> None:
        with self._lock:
            self.disconnected = False

    def freeze(self, on: bool = True) -> None:
        """Return the last image again and again with ok=True."""
        with self._lock:
            self.frozen = on

    def _take(self) -> tuple[float, bool, bool, bool]:
        with self._lock:
            stall, self.stall_sec = self.stall_sec, 0.0
            fail = self.fail_reads > 0
            if fail:
                self.fail_reads -= 1
            return stall, fail, self.disconnected, self.frozen


_REGISTRY: dict[str, SyntheticFaults] = {}
_REG_LOCK = threading.Lock()


def synthetic_faults(camera_id: str) -> SyntheticFaults:
    """The fault switches shared by every synthetic source opened with ``id=camera_id``."""
    with _REG_LOCK:
        return _REGISTRY.setdefault(camera_id, SyntheticFaults())


class SyntheticCamera(CameraSource):
    """Paced generator of BGR test frames; read() sleeps until the next frame is due."""

    DEFAULT_FPS: ClassVar[float] = 30.0

    def __init__(
        self,
        fps: float = DEFAULT_FPS,
        width: int = 1280,
        height: int = 720,
        faults: SyntheticFaults | None = None,
        camera_id: str | None = None,
        freeze_after: float | None = None,
        disconnect_after: float | None = None,
    ) -> None:
        if not (0 < fps <= 1000):
            raise ValueError(f"synthetic fps must be in (0, 1000], got {fps}")
        if not (16 <= width <= 7680 and 16 <= height <= 4320):
            raise ValueError(f"synthetic size {width}x{height} out of range")
        self.fps = float(fps)
        self.width, self.height = int(width), int(height)
        if faults is None:
            faults = synthetic_faults(camera_id) if camera_id else SyntheticFaults()
        self.faults = faults
        self.freeze_after = freeze_after
        self.disconnect_after = disconnect_after
        self.spec = f"synthetic?fps={self.fps:g}&w={self.width}&h={self.height}"
        self._open = False
        self._wake = threading.Event()
        self._count = 0
        self._t0 = 0.0
        self._opened_at = 0.0
        self._last: NDArray[np.uint8] | None = None
        self._base = self._background()

    def _background(self) -> NDArray[np.uint8]:
        h, w = self.height, self.width
        x = np.linspace(40, 120, w, dtype=np.float32)
        y = np.linspace(0, 60, h, dtype=np.float32)[:, None]
        img = np.empty((h, w, 3), np.uint8)
        img[..., 0] = (x + y).astype(np.uint8)
        img[..., 1] = (x * 0.5 + 30).astype(np.uint8)
        img[..., 2] = (70 + y).astype(np.uint8)
        return img

    @property
    def is_open(self) -> bool:
        return self._open

    def open(self) -> None:
        if self.faults.disconnected:
            raise CameraOpenError(f"{self.spec}: device not present (simulated disconnect)")
        self._wake.clear()
        self._count = 0
        self._t0 = self._opened_at = time.monotonic()
        self._last = None
        self._open = True

    def close(self) -> None:
        self._open = False
        self._wake.set()

    def _render(self, n: int, wall: float) -> NDArray[np.uint8]:
        img = self._base.copy()
        h, w = self.height, self.width
        bar = int((n * 8) % max(1, w - 40))
        cv2.rectangle(img, (bar, h - 90), (bar + 40, h - 20), (40, 200, 240), -1)
        scale = h / 240.0
        cv2.putText(
            img,
            f"frame {n:06d}",
            (int(w * 0.05), int(h * 0.3)),
            cv2.FONT_HERSHEY_SIMPLEX,
            scale,
            (255, 255, 255),
            max(1, int(scale * 2)),
        )
        stamp = time.strftime("%H:%M:%S", time.localtime(wall)) + f".{int(wall * 1000) % 1000:03d}"
        cv2.putText(
            img,
            stamp,
            (int(w * 0.05), int(h * 0.55)),
            cv2.FONT_HERSHEY_SIMPLEX,
            scale * 0.7,
            (255, 255, 255),
            max(1, int(scale)),
        )
        return img

    def read(self) -> Frame:
        if not self._open:
            raise CameraNotOpenError(f"{self.spec}: read() on a closed camera")
        stall, fail, disconnected, frozen = self.faults._take()
        if stall > 0:
            self._wake.wait(stall)
        due = self._t0 + self._count / self.fps
        delay = due - time.monotonic()
        if delay > 0:
            self._wake.wait(delay)
        else:
            # fell behind (stall, slow consumer): re-anchor instead of bursting frames
            self._t0 = time.monotonic() - self._count / self.fps
        self._count += 1
        if not self._open:
            return Frame(False, None, time.time(), time.monotonic_ns())
        since = time.monotonic() - self._opened_at
        if self.disconnect_after is not None and since >= self.disconnect_after:
            disconnected = True
        if self.freeze_after is not None and since >= self.freeze_after:
            frozen = True
        wall, mono = time.time(), time.monotonic_ns()
        if disconnected or fail:
            return Frame(False, None, wall, mono)
        if frozen and self._last is not None:
            return Frame(True, self._last, wall, mono)
        img = self._render(self._count - 1, wall)
        self._last = img
        return Frame(True, img, wall, mono)
