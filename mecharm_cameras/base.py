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
from dataclasses import dataclass
from typing import Any

from numpy.typing import NDArray

__all__ = [
    "CameraError",
    "CameraNotOpenError",
    "CameraOpenError",
    "CameraSource",
    "Frame",
]


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

    def __enter__(self) -> CameraSource:
        if not self.is_open:
            self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec!r})"
