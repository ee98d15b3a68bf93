"""Daemon counters and per-command latency, reported by the ``stats`` command."""

from __future__ import annotations

import time
from collections import Counter, deque
from typing import Any

__all__ = ["DaemonStats"]

_WINDOW = 2000  # latency samples kept per command


def _percentile(sorted_vals: list[float], q: float) -> float:
    if not sorted_vals:
        return 0.0
    k = min(len(sorted_vals) - 1, max(0, round(q * (len(sorted_vals) - 1))))
    return sorted_vals[k]


class DaemonStats:
    """Counters since start. Only touched from the event loop thread."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.counters: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.per_command: Counter[str] = Counter()
        self._latency: dict[str, deque[float]] = {}

    def count(self, name: str, n: int = 1) -> None:
        self.counters[name] += n

    def record(self, cmd: str, seconds: float, error_code: str | None) -> None:
        self.counters["requests"] += 1
        self.per_command[cmd] += 1
        if error_code is not None:
            self.errors[error_code] += 1
        window = self._latency.get(cmd)
        if window is None:  # not setdefault: that would build a throw-away deque per request
            window = self._latency[cmd] = deque(maxlen=_WINDOW)
        window.append(seconds)

    def snapshot(self) -> dict[str, Any]:
        latency: dict[str, dict[str, float]] = {}
        for cmd, samples in self._latency.items():
            vals = sorted(samples)
            latency[cmd] = {
                "n": len(vals),
                "p50_ms": round(_percentile(vals, 0.50) * 1000, 3),
                "p95_ms": round(_percentile(vals, 0.95) * 1000, 3),
                "p99_ms": round(_percentile(vals, 0.99) * 1000, 3),
                "max_ms": round(vals[-1] * 1000, 3),
            }
        return {
            "uptime_s": round(time.monotonic() - self.started, 3),
            "counters": dict(self.counters),
            "errors": dict(self.errors),
            "commands": dict(self.per_command),
            "latency": latency,
        }
