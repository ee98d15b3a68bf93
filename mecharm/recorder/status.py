"""Operator-facing health: the periodic status line and rate-limited rejection logs."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RateLimitedLog", "StatusCounters"]


@dataclass
class StatusCounters:
    """Counters since start, read by the status line and the tests."""

    events: int = 0
    rejected: int = 0
    #: datagrams dropped because the dispatcher's buffer was full (see RecorderSettings.event_buffer)
    dropped_events: int = 0
    ignored_no_trial: int = 0
    frame_requests: int = 0
    trials_started: int = 0
    trials_closed: int = 0
    last_event_mono: float | None = None
    reasons: dict[str, int] = field(default_factory=dict)
    #: datagrams dropped before any handler acted on them, by reason (docs/recorder.md,
    #: "Authenticated events": unsigned, bad_mac, replayed, foreign_trial, trial_quota, ...)
    refused: dict[str, int] = field(default_factory=dict)

    def reply(self, reason: str) -> None:
        self.reasons[reason] = self.reasons.get(reason, 0) + 1

    def refuse(self, reason: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1

    def last_event_age(self) -> float | None:
        if self.last_event_mono is None:
            return None
        return round(time.monotonic() - self.last_event_mono, 3)


class RateLimitedLog:
    """At most ``per_sec`` lines a second for one event name; the rest are counted.

    A flood of hostile datagrams must not turn into a flood of log lines (the
    log is the operator's tool); the suppressed count is reported once the
    window has passed.
    """

    def __init__(self, logger: Any, event: str, per_sec: int = 10) -> None:
        self.log = logger
        self.event = event
        self.per_sec = per_sec
        self._window = 0.0
        self._count = 0
        self.suppressed = 0

    def __call__(self, **kw: Any) -> None:
        now = time.monotonic()
        if now - self._window >= 1.0:
            if self.suppressed:
                self.log.warning(f"{self.event}_suppressed", count=self.suppressed)
                self.suppressed = 0
            self._window, self._count = now, 0
        self._count += 1
        if self._count <= self.per_sec:
            self.log.warning(self.event, **kw)
        else:
            self.suppressed += 1
