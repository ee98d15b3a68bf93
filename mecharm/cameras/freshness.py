"""How old a camera frame may be: one rule, one name (``max_age_s``), for every reader.

A frame is fresh for a request when it was captured no more than ``max_age_s``
before the moment of asking (``is_fresh``), on the source's monotonic capture
stamp (``Frame.mono_ns``). A background reader keeps the newest frame in a
``FrameBuffer``; a reader asks ``read_latest(max_age_s)`` and gets the frame with
its age, or ``StaleFrameError`` (too old, age given) or ``NoFrameError`` (none
yet, or the feed was lost and its frame forgotten). A frozen feed — fresh stamps
on the same image — is a distinct verdict: ``FreezeWatch`` spots it and the
buffered frame carries ``frozen``. Why and who asks with which age:
docs/recorder.md#frame-freshness.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

import numpy as np

from mecharm.cameras.base import CameraError

__all__ = [
    "AgedFrame",
    "FrameBuffer",
    "FreezeWatch",
    "NoFrameError",
    "StaleFrameError",
    "frame_age_s",
    "frame_hash",
    "is_fresh",
]


class _Stamped(Protocol):
    @property
    def mono_ns(self) -> int: ...


T = TypeVar("T", bound=_Stamped)


def frame_age_s(mono_ns: int, now_ns: int) -> float:
    """Seconds between a frame's capture and ``now_ns`` (both ``time.monotonic_ns``)."""
    return (now_ns - mono_ns) / 1e9


def is_fresh(mono_ns: int, max_age_s: float, asked_ns: int) -> bool:
    """The rule: captured no more than ``max_age_s`` before the request made at ``asked_ns``."""
    return asked_ns - mono_ns <= round(max_age_s * 1e9)


@dataclass(frozen=True, slots=True)
class AgedFrame(Generic[T]):
    """A buffered frame with its age at the moment it was asked for."""

    frame: T
    age_s: float
    frozen: bool

    @property
    def age_ms(self) -> float:
        return round(self.age_s * 1e3, 3)


class StaleFrameError(CameraError):
    """The newest frame is older than the reader allows; ``latest`` carries it and its age."""

    def __init__(self, latest: AgedFrame[Any], max_age_s: float) -> None:
        super().__init__(
            f"newest frame is {latest.age_ms:.0f} ms old (max {max_age_s * 1e3:.0f} ms)"
        )
        self.latest = latest
        self.max_age_s = max_age_s


class NoFrameError(CameraError):
    """No frame to give: none captured yet, or the feed was lost (``reason`` says which)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"no frame: {reason}")
        self.reason = reason


class FrameBuffer(Generic[T]):
    """The newest frame of one feed, written by its reader thread, read by anyone.

    Lock-free: the slot is one tuple swapped by reference, so a reader never
    waits on the camera. ``lose`` forgets the frame: a lost feed's last image is
    never served as if it were current.
    """

    def __init__(self, clock_ns: Callable[[], int] = time.monotonic_ns) -> None:
        self._clock_ns = clock_ns
        self._slot: tuple[T, bool] | None = None
        self._lost: str | None = None

    def put(self, frame: T, frozen: bool = False) -> None:
        self._slot = (frame, frozen)
        self._lost = None

    def lose(self, reason: str) -> None:
        self._lost = reason
        self._slot = None

    @property
    def newest(self) -> T | None:
        slot = self._slot
        return None if slot is None else slot[0]

    def read_latest(self, max_age_s: float) -> AgedFrame[T]:
        """The newest frame if fresh; StaleFrameError / NoFrameError otherwise. Never blocks."""
        slot = self._slot
        if slot is None:
            raise NoFrameError(f"feed lost ({self._lost})" if self._lost else "none captured yet")
        frame, frozen = slot
        now = self._clock_ns()
        latest = AgedFrame(frame, frame_age_s(frame.mono_ns, now), frozen)
        if not is_fresh(frame.mono_ns, max_age_s, now):
            raise StaleFrameError(latest, max_age_s)
        return latest


def frame_hash(image: np.ndarray) -> int:
    """Cheap content hash (every 8th row): a live sensor never repeats it; a frozen feed does."""
    return zlib.crc32(np.ascontiguousarray(image[::8]).data)


class FreezeWatch:
    """Frozen feed: the same image for ``frozen_after_s`` of capture time, until it changes.

    ``update`` returns the transition it saw (``"frozen"`` / ``"unfrozen"``) so
    the caller logs it once; ``frozen_for_s`` says for how long.
    """

    def __init__(self, frozen_after_s: float) -> None:
        self.frozen_after_ns = round(frozen_after_s * 1e9)
        self.reset()

    def reset(self) -> None:
        self.frozen = False
        self._hash: int | None = None
        self._same_since: int | None = None
        self._prev_mono: int | None = None
        self.frozen_for_s = 0.0

    def update(self, image: np.ndarray, mono_ns: int) -> Literal["frozen", "unfrozen"] | None:
        h = frame_hash(image)
        change: Literal["frozen", "unfrozen"] | None = None
        if h == self._hash:
            if self._same_since is None:
                self._same_since = self._prev_mono
            if self._same_since is not None:
                self.frozen_for_s = (mono_ns - self._same_since) / 1e9
                if not self.frozen and mono_ns - self._same_since >= self.frozen_after_ns:
                    self.frozen, change = True, "frozen"
        else:
            if self.frozen:
                self.frozen_for_s = (mono_ns - (self._same_since or mono_ns)) / 1e9
                change = "unfrozen"
            self.frozen = False
            self._same_since = None
        self._hash = h
        self._prev_mono = mono_ns
        return change
