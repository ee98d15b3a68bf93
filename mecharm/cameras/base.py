"""The one camera interface (``CameraSource``) every source implements.

A source is opened, read frame by frame, and closed. ``read()`` blocks until the
next frame or a failure and never raises for device trouble: it returns a
``Frame`` with ``ok=False`` (the caller counts consecutive failures and decides
the camera is lost). Timestamps are taken the moment the frame is obtained, on
both clocks: wall (``time.time()``, comparable with event ``ts``) and monotonic
(``time.monotonic_ns()``, for intervals and PTS).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import cv2
import numpy as np
from numpy.typing import NDArray

from mecharm.common.logging import get_logger

__all__ = [
    "CameraError",
    "CameraNotOpenError",
    "CameraOpenError",
    "CameraSource",
    "Frame",
    "FrameTap",
    "fit_image",
]


log = get_logger("mecharm.cameras")

#: A tap sees every frame a source obtains, on the thread that obtained it: ``(data, wall_ts,
#: mono_ns)`` where ``data`` is the source's own JPEG bytes (``bytes``) or, for a source that
#: delivers pixels, the BGR image (not a copy: a tap must not modify it). It must return at
#: once (hand the frame to a queue, never write or encode there). docs/top-camera.md
FrameTap = Callable[[Any, float, int], None]


class CameraError(ConnectionError):
    """Base of camera errors."""


class CameraOpenError(CameraError):
    """The source could not be opened; the message names the source and the cause."""


class CameraNotOpenError(CameraError):
    """read() on a source that is not open (a programming error, not a device failure)."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One read: ``ok`` and, when ok, a BGR uint8 image (H, W, 3).

    ``jpeg`` holds the source's own JPEG bytes when it delivered JPEG (MJPEG over
    HTTP): a snapshot can then be written as is, with no re-encode.
    """

    ok: bool
    image: NDArray[Any] | None
    wall_ts: float
    mono_ns: int
    jpeg: bytes | None = None

    def __iter__(self):  # type: ignore[no-untyped-def]
        """Unpack like OpenCV: ``ok, image, wall_ts, mono_ns = cam.read()``."""
        return iter((self.ok, self.image, self.wall_ts, self.mono_ns))


class CameraSource(ABC):
    """Base of camera sources. Use as a context manager or call open()/close()."""

    #: human-readable description of the source, for logs and the meta file.
    spec: str = ""
    #: True when the source obtains frames continuously on its own thread (every frame reaches
    #: the taps whether or not anyone calls read()); False: frames are obtained in read() only,
    #: so a tap sees only what is read (wrap it in ``ThreadedCamera`` to see every frame)
    taps_every_frame: ClassVar[bool] = False
    _taps: tuple[FrameTap, ...] = ()
    _tap_failed: bool = False

    @abstractmethod
    def open(self) -> None:
        """Open the device/stream. Raises CameraOpenError; never leaves it half-open."""

    @abstractmethod
    def read(self) -> Frame:
        """Block until the next frame; ok=False on failure. Raises CameraNotOpenError."""

    @abstractmethod
    def close(self) -> None:
        """Release the device; idempotent; unblocks a read() in progress where possible."""

    @property
    @abstractmethod
    def is_open(self) -> bool: ...

    # --- taps (docs/top-camera.md) -------------------------------------------------------
    def newest(self) -> tuple[Any, float, int] | None:
        """The newest frame already obtained, as a tap receives it (``data, wall_ts, mono_ns``),
        without waiting; None when there is none yet. A source that obtains frames only in
        read() has none to give (a recording started now begins with the next frame)."""
        return None

    def add_tap(self, tap: FrameTap) -> None:
        """Call ``tap`` with every frame from now on (see ``FrameTap``)."""
        self._taps = (*self._taps, tap)  # swapped by reference: the reader never takes a lock

    def remove_tap(self, tap: FrameTap) -> None:
        """Stop calling ``tap``; a frame being handed to it may still arrive once.

        Compared by equality, not identity: a bound method (``writer.offer``) is a new object
        at each access but equal to the one added."""
        self._taps = tuple(t for t in self._taps if t != tap)

    def _tap(self, data: Any, wall_ts: float, mono_ns: int) -> None:
        """Hand one frame to the taps; never raises into the reader (a failing tap is logged
        once per source and keeps being called: it decides itself what a failure means)."""
        for tap in self._taps:
            try:
                tap(data, wall_ts, mono_ns)
            except Exception as exc:
                if not self._tap_failed:
                    self._tap_failed = True
                    log.error("camera_tap_failed", camera=self.spec, error=f"{exc!r}"[:200])

    def __enter__(self) -> CameraSource:
        if not self.is_open:
            self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec!r})"


def fit_image(
    bgr: NDArray[Any], width: int | None, height: int | None, *, rgb: bool
) -> NDArray[Any]:
    """A frame as a learning feature promises it: resized to ``width`` x ``height`` when
    both are given and differ (``INTER_AREA``, the one that averages when shrinking), in RGB
    when ``rgb`` (OpenCV gives BGR; lerobot's cameras give RGB), contiguous."""
    if width is not None and height is not None and bgr.shape[:2] != (height, width):
        bgr = cv2.resize(bgr, (width, height), interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray(bgr[:, :, ::-1] if rgb else bgr)
