"""The pose guard: every pose passes it before it is sent (docs/runtime.md, "Motion").

Checks, in order: six finite numbers, the SDK joint limits, j1 <= 88° (the firmware
silently ignores sends above ~90.7°, so 88° is the operational limit), the daemon's
safety envelope when one is given (docs/daemon.md, "Safety envelope"), and the
lookup's own verdict when the pose came from a lookup.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from mecharm.common.envelope import Envelope
from mecharm.common.kinematics import JOINT_MAX, JOINT_MIN

__all__ = ["GuardVerdict", "GuardViolation", "check_pose"]


class GuardViolation(RuntimeError):
    """A pose failed the guard at the last line of defence (the arm adapter)."""


@dataclass(frozen=True)
class GuardVerdict:
    ok: bool
    reason: str
    angles: tuple[float, ...]

    def to_dict(self) -> dict[str, object]:
        return {"ok": self.ok, "reason": self.reason, "angles": list(self.angles)}


def check_pose(
    angles: Sequence[float],
    *,
    j1_max: float = 88.0,
    lookup_ok: bool | None = None,
    lookup_reason: str = "",
    envelope: Envelope | None = None,
) -> GuardVerdict:
    """Return the guard verdict for ``angles``; never raises on bad input.

    ``envelope``: the daemon's (from its hello); a pose outside it fails here, before
    the daemon would refuse it."""
    try:
        a = tuple(float(v) for v in angles)
    except (TypeError, ValueError):
        return GuardVerdict(False, f"pose is not a list of numbers: {angles!r}", ())
    if len(a) != 6:
        return GuardVerdict(False, f"pose has {len(a)} values, not 6", a)
    if lookup_ok is False:
        return GuardVerdict(False, f"lookup verdict out_of_range: {lookup_reason}".rstrip(": "), a)
    for i, v in enumerate(a):
        if not math.isfinite(v):
            return GuardVerdict(False, f"j{i} is not finite", a)
        if not JOINT_MIN[i] <= v <= JOINT_MAX[i]:
            return GuardVerdict(
                False, f"j{i} = {v:.2f} outside the SDK limits [{JOINT_MIN[i]}, {JOINT_MAX[i]}]", a
            )
    if a[1] > j1_max:
        return GuardVerdict(False, f"j1 = {a[1]:.2f} above the safety limit {j1_max}", a)
    bad = envelope.violation(a) if envelope is not None else None
    if bad is not None:
        return GuardVerdict(False, f"{bad.message()} (the daemon's safety envelope)", a)
    return GuardVerdict(True, "ok", a)
