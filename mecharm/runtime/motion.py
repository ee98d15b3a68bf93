"""Send a pose and wait for arrival, exactly as the reference rig (docs/runtime.md, "Motion").

1. read the current angles; none readable → abort (no fallback);
2. timeout = max(8.0, 2.0 + 0.15 s/° × max|target − current|) (÷ time_scale);
3. send once, poll ``get_angles`` until max|Δ| <= tol;
4. on timeout: moved < 1.0° from the start → the send was ignored: wait, re-read,
   re-send once (never more); moved >= 1.0° (partial move, stall) or a held axis
   moved more than tol → no retry;
5. an optional ``SendObserver`` hears of each send the moment it went on the wire
   (with the angles the daemon says it sent) and again when its wait ended; with
   no observer (and no reading hook) nothing extra is done.

Decisions use only the readings' own timestamps, so replaying recorded readings
reproduces them exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from mecharm.runtime.ports import ArmPort, Clock, Reading, Sent

__all__ = [
    "MotionAbort",
    "MotionPolicy",
    "MoveResult",
    "RestResult",
    "SendObserver",
    "SendRecord",
    "arrival_timeout",
    "send_and_wait",
    "wait_at_rest",
]


class SendObserver(Protocol):
    """Told of each send as it happens (the recorder's ``commanded`` and ``arrival`` rows)."""

    def sent(self, sent: Sent, ts_send: float, attempt: int) -> None: ...
    def settled(self, record: SendRecord) -> None: ...


class MotionAbort(RuntimeError):
    """The motion cannot be carried out or judged (e.g. no angles readable)."""


@dataclass(frozen=True)
class MotionPolicy:
    arrival_min_s: float = 8.0
    arrival_base_s: float = 2.0
    arrival_per_deg_s: float = 0.15
    ignored_move_deg: float = 1.0
    send_wait_s: float = 1.0
    poll_interval_s: float = 0.0
    time_scale: float = 1.0


def arrival_timeout(max_delta_deg: float, policy: MotionPolicy) -> float:
    """The arrival timeout in real-rig seconds (86.16° → 14.9 s, 14.05° → 8.0 s)."""
    return max(
        policy.arrival_min_s, policy.arrival_base_s + policy.arrival_per_deg_s * max_delta_deg
    )


@dataclass
class SendRecord:
    attempt: int
    ts_send: float
    ts_arrival: float | None
    arrived: bool
    timeout_s: float
    readings: int = 0
    #: the angles that went on the wire (the daemon's reply)
    sent: tuple[float, ...] = ()


@dataclass
class MoveResult:
    target: tuple[float, ...]
    tol: float
    speed: int
    pre: tuple[float, ...]
    post: tuple[float, ...] | None
    arrived: bool
    reason: str
    sends: list[SendRecord] = field(default_factory=list)
    read_errors: int = 0

    @property
    def attempts(self) -> int:
        return len(self.sends)

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": list(self.target), "tol": self.tol, "speed": self.speed,
            "pre": list(self.pre), "post": list(self.post) if self.post else None,
            "arrived": self.arrived, "reason": self.reason, "attempts": self.attempts,
            "read_errors": self.read_errors,
            "sends": [s.__dict__ for s in self.sends],
        }  # fmt: skip


def _max_delta(a: Sequence[float], b: Sequence[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


async def _read_or_abort(arm: ArmPort, what: str) -> tuple[Reading, tuple[float, ...]]:
    r = await arm.read_angles()
    if r.angles is None:
        raise MotionAbort(f"no angles readable {what}: {r.error}")
    return r, r.angles


async def send_and_wait(
    arm: ArmPort,
    clock: Clock,
    target: Sequence[float],
    *,
    tol: float,
    speed: int,
    policy: MotionPolicy,
    observer: SendObserver | None = None,
    on_reading: Callable[[Reading], None] | None = None,
) -> MoveResult:
    """Send ``target`` and wait for arrival within ``tol`` degrees.

    Returns a MoveResult (``arrived`` False with a reason on timeout). Raises
    MotionAbort when the start pose cannot be read, and lets the daemon client's
    ConnectionLost / DaemonTimeout / ArmRefused through (the trial must abort).
    """
    tgt = tuple(float(a) for a in target)
    start, ref = await _read_or_abort(arm, "before the send")
    if on_reading is not None:
        on_reading(start)
    result = MoveResult(tgt, tol, speed, ref, None, False, "")
    for attempt in (1, 2):
        timeout = arrival_timeout(_max_delta(tgt, ref), policy) / policy.time_scale
        ts_send = clock.wall()
        sent = await arm.send_angles(tgt, speed)
        t_send = sent.t
        rec = SendRecord(attempt, ts_send, None, False, timeout, sent=sent.angles)
        result.sends.append(rec)
        if observer is not None:
            observer.sent(sent, ts_send, attempt)
        last: tuple[float, ...] | None = None
        while True:
            r = await arm.read_angles()
            if on_reading is not None:
                on_reading(r)
            if r.angles is None:
                result.read_errors += 1
            else:
                rec.readings += 1
                last = r.angles
                if _max_delta(tgt, last) <= tol:
                    rec.ts_arrival, rec.arrived = clock.wall(), True
                    break
            # the deadline has passed only for a reading asked for after it: one answered
            # late shows the arm as it was before (a busy daemon or link; docs/runtime.md)
            if r.asked - t_send > timeout:
                break
            if policy.poll_interval_s > 0:
                await clock.sleep(policy.poll_interval_s / policy.time_scale)
        if observer is not None:
            observer.settled(rec)
        if rec.arrived:
            result.post, result.arrived = last, True
            result.reason = (
                "arrived" if attempt == 1 else "arrived after one re-send (first send ignored)"
            )
            return result
        if last is None:
            raise MotionAbort(f"no angles readable while waiting for arrival (attempt {attempt})")
        result.post = last
        moved = _max_delta(last, ref)
        held = [i for i in range(6) if abs(tgt[i] - ref[i]) <= tol and abs(last[i] - ref[i]) > tol]
        if held:
            j = held[0]
            result.reason = f"arrival timeout after {timeout:.2f}s: held axis j{j} moved {abs(last[j] - ref[j]):.2f}° (no retry)"
            return result
        if moved >= policy.ignored_move_deg:
            result.reason = (
                f"arrival timeout after {timeout:.2f}s: partial move/stall, moved {moved:.2f}°, "
                f"still {_max_delta(tgt, last):.2f}° from target (no retry)"
            )
            return result
        if attempt == 2:
            result.reason = (
                f"arrival timeout after {timeout:.2f}s: re-send ignored too (moved {moved:.2f}°)"
            )
            return result
        # the send was ignored: wait, re-read, re-send once
        await clock.sleep(policy.send_wait_s / policy.time_scale)
        again, ref = await _read_or_abort(arm, "before the re-send")
        if on_reading is not None:
            on_reading(again)
    raise AssertionError("unreachable")  # pragma: no cover


@dataclass(frozen=True)
class RestResult:
    at_rest: bool
    readings: int
    last_delta_deg: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "at_rest": self.at_rest,
            "readings": self.readings,
            "last_delta_deg": self.last_delta_deg,
        }


async def wait_at_rest(
    arm: ArmPort,
    clock: Clock,
    *,
    eps_deg: float,
    poll_s: float,
    max_polls: int,
    on_reading: Callable[[Reading], None] | None = None,
) -> RestResult:
    """Poll until two successive readings agree within ``eps_deg`` (docs/runtime.md, "Motion": measure at rest).

    "Arrived" means within tol of the target, but the arm still settles for a moment;
    a camera measurement taken then depends on timing. Bounded by ``max_polls``
    readings (not by the clock) so a replay of the same readings decides the same.
    Never raises for an unreadable arm: the caller goes on with ``at_rest`` False.
    """
    prev: tuple[float, ...] | None = None
    delta: float | None = None
    for n in range(1, max_polls + 1):
        r = await arm.read_angles()
        if on_reading is not None:
            on_reading(r)
        if r.angles is not None:
            if prev is not None:
                delta = _max_delta(prev, r.angles)
                if delta <= eps_deg:
                    return RestResult(True, n, delta)
            prev = r.angles
        if n < max_polls:
            await clock.sleep(poll_s)
    return RestResult(False, max_polls, delta)
