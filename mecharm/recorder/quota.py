"""Budgets on what the recorder writes and answers outside the runtime's control (docs/recorder.md, "Quotas").

Orphan frames (frame requests outside a trial) and trial folders each have a
count and a byte budget over a sliding hour. The defaults are far above what an
operator produces (a trial lasts minutes); they bound what a misbehaving sender
holding the key can write to the disk. A token bucket bounds the rate of frame requests
and pings, so a flood can neither fill the disk with JPEGs nor reflect traffic.
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path

__all__ = ["Bucket", "HourlyQuota", "file_bytes", "folder_bytes"]


def file_bytes(path: Path) -> int:
    """A file's size; 0 when it cannot be read (gone, or the disk failed)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def folder_bytes(folder: Path) -> int:
    """Bytes of the files of one trial folder (for the hourly trial quota)."""
    try:
        return sum(file_bytes(p) for p in folder.rglob("*") if p.is_file())
    except OSError:
        return 0


class Bucket:
    """Token bucket: at most ``rate`` a second, bursts of one second's worth."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.tokens = rate
        self.refill = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.rate, self.tokens + (now - self.refill) * self.rate)
        self.refill = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class HourlyQuota:
    """``max_count`` items and ``max_bytes`` bytes within the last ``window_sec`` (sliding)."""

    def __init__(self, name: str, max_count: int, max_bytes: int, window_sec: float = 3600.0):
        self.name = name
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.window_sec = window_sec
        #: (monotonic time, items, bytes); one entry per item or per bytes added
        self._entries: deque[tuple[float, int, int]] = deque()
        self._count = 0
        self._bytes = 0
        self._next_log = 0.0
        self.refused = 0

    def _prune(self, now: float) -> None:
        cut = now - self.window_sec
        while self._entries and self._entries[0][0] <= cut:
            _, n, b = self._entries.popleft()
            self._count -= n
            self._bytes -= b

    def exceeded(self, now: float | None = None) -> str | None:
        """None while there is room, else which limit was reached (for the log and the reply)."""
        now = time.monotonic() if now is None else now
        self._prune(now)
        if self._count >= self.max_count:
            return f"{self.name}: {self.max_count} per hour reached"
        if self._bytes >= self.max_bytes:
            return f"{self.name}: {self.max_bytes} bytes per hour reached"
        return None

    def add(self, items: int = 0, nbytes: int = 0, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self._entries.append((now, items, nbytes))
        self._count += items
        self._bytes += nbytes

    def log_due(self, now: float | None = None) -> bool:
        """True once per window: the quota log line is not repeated for every refusal."""
        now = time.monotonic() if now is None else now
        if now >= self._next_log:
            self._next_log = now + self.window_sec
            return True
        return False

    def usage(self) -> dict[str, int]:
        self._prune(time.monotonic())
        return {"count": self._count, "bytes": self._bytes}
