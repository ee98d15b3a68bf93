"""The safety envelope: joint limits narrower than the SDK's, checked by the daemon and the runtime.

Why one type in one place: the daemon enforces the envelope for every client (a notebook
or a script cannot bypass the runtime's guard), announces it in its ``hello``, and the
runtime checks its own settings against the same object and guards its poses with it.
See docs/daemon.md, "Safety envelope".

Plain Python (no numpy arrays): the check runs on every ``send_angles`` of the daemon.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from mecharm.common.kinematics import JOINT_MAX, JOINT_MIN

__all__ = [
    "DEFAULT_J1_MAX",
    "Envelope",
    "EnvelopeViolation",
    "RuntimeLimits",
    "wider_than_envelope",
]

#: the firmware silently ignores sends with j1 above ~90.7°; 88° is the operational limit
DEFAULT_J1_MAX = 88.0

_N = 6


@dataclass(frozen=True)
class EnvelopeViolation:
    """One joint outside the envelope: which joint, its value and the limit it broke."""

    joint: int
    value: float
    limit: float
    #: "min"/"max": below/above the joint's limit; "step": |target - current| above the bound
    side: Literal["min", "max", "step"]
    current: float | None = None

    def message(self) -> str:
        j = f"j{self.joint}"
        if self.side == "step":
            return (
                f"{j} would move {abs(self.value - (self.current or 0.0)):.2f}° in one "
                f"send_angles (from {self.current:.2f} to {self.value:.2f}), above the "
                f"envelope's per-move bound {self.limit:g}°"
            )
        word = (
            "below the envelope's minimum" if self.side == "min" else "above the envelope's maximum"
        )
        shown = f"{self.value:.2f}"
        # 88.004 is not "88.00 above 88": show the digits that differ
        if float(shown) == self.limit:
            shown = f"{self.value:.6g}"
        return f"{j} = {shown} is {word} {self.limit:g}°"


def _six(name: str, values: Sequence[Any]) -> tuple[float, ...]:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise ValueError(f"{name} must be a list of 6 numbers, got {values!r}")
    if len(values) != _N:
        raise ValueError(f"{name} must have 6 values (j0..j5), got {len(values)}")
    out = []
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ValueError(f"{name}[{i}] (j{i}) must be a finite number, got {v!r}")
        out.append(float(v))
    return tuple(out)


@dataclass(frozen=True)
class Envelope:
    """Per-joint limits (degrees) within the SDK's and an optional per-move change bound.

    Construction validates: six finite numbers per side, ``min < max`` for every joint,
    and nothing wider than the SDK limits (``ValueError`` naming the joint otherwise).
    ``max_step_deg`` (None = off): the largest ``|target - current|`` of any joint in
    one ``send_angles``.
    """

    joint_min: tuple[float, ...] = JOINT_MIN
    joint_max: tuple[float, ...] = field(default=(JOINT_MAX[0], DEFAULT_J1_MAX, *JOINT_MAX[2:]))
    max_step_deg: float | None = None

    def __post_init__(self) -> None:
        lo = _six("joint_min", self.joint_min)
        hi = _six("joint_max", self.joint_max)
        object.__setattr__(self, "joint_min", lo)
        object.__setattr__(self, "joint_max", hi)
        for i in range(_N):
            if lo[i] < JOINT_MIN[i]:
                raise ValueError(
                    f"joint_min[{i}] = {lo[i]:g} is below the SDK limit {JOINT_MIN[i]:g} of "
                    f"j{i}; the envelope may only narrow the SDK limits"
                )
            if hi[i] > JOINT_MAX[i]:
                raise ValueError(
                    f"joint_max[{i}] = {hi[i]:g} is above the SDK limit {JOINT_MAX[i]:g} of "
                    f"j{i}; the envelope may only narrow the SDK limits"
                )
            if not lo[i] < hi[i]:
                raise ValueError(f"j{i}: joint_min {lo[i]:g} must be below joint_max {hi[i]:g}")
        step = self.max_step_deg
        if step is not None:
            if isinstance(step, bool) or not isinstance(step, int | float):
                raise ValueError(f"max_step_deg must be a number or null, got {step!r}")
            if not (math.isfinite(step) and step > 0):
                raise ValueError(f"max_step_deg must be > 0 (or null = off), got {step!r}")
            object.__setattr__(self, "max_step_deg", float(step))

    # ------------------------------------------------------------ checks
    def violation(self, angles: Sequence[float]) -> EnvelopeViolation | None:
        """The first joint of ``angles`` (six finite numbers) outside the limits, else None."""
        lo, hi = self.joint_min, self.joint_max
        for i in range(_N):
            a = angles[i]
            if a < lo[i]:
                return EnvelopeViolation(i, a, lo[i], "min")
            if a > hi[i]:
                return EnvelopeViolation(i, a, hi[i], "max")
        return None

    def step_violation(
        self, target: Sequence[float], current: Sequence[float]
    ) -> EnvelopeViolation | None:
        """The joint whose change from ``current`` is largest above ``max_step_deg``, else None."""
        bound = self.max_step_deg
        if bound is None:
            return None
        worst, worst_i = bound, -1
        for i in range(_N):
            d = abs(target[i] - current[i])
            if d > worst:
                worst, worst_i = d, i
        if worst_i < 0:
            return None
        return EnvelopeViolation(worst_i, target[worst_i], bound, "step", current[worst_i])

    # ------------------------------------------------------------ wire form (hello)
    def to_wire(self) -> dict[str, Any]:
        return {
            "joint_min": list(self.joint_min),
            "joint_max": list(self.joint_max),
            "max_step_deg": self.max_step_deg,
        }

    @classmethod
    def from_wire(cls, data: Any) -> Envelope:
        """Read the ``envelope`` of a hello; ValueError naming what is wrong."""
        if not isinstance(data, Mapping):
            raise ValueError(f"envelope must be an object, got {type(data).__name__}")
        extra = set(data) - {"joint_min", "joint_max", "max_step_deg"}
        if extra:
            raise ValueError(f"envelope has unknown fields {sorted(extra)}")
        try:
            return cls(data["joint_min"], data["joint_max"], data.get("max_step_deg"))
        except KeyError as exc:
            raise ValueError(f"envelope lacks {exc.args[0]!r}") from None


@dataclass(frozen=True)
class RuntimeLimits:
    """What a client (the runtime) will ask of the arm, to compare with an envelope.

    ``j1_max``: the client's own j1 limit. ``poses``: named poses it sends as they are
    (home, the sweep pose's j0, ...): each must lie inside the envelope.
    ``joints``: single joint values it sends whatever the other joints are, as
    name -> (joint, value) (the sweep's ``swept_j0``). ``joint_step_max_deg``: the
    client's own per-move bound (None = it has none, so it is not compared).
    """

    j1_max: float
    poses: Mapping[str, Sequence[float]] = field(default_factory=dict)
    joints: Mapping[str, tuple[int, float]] = field(default_factory=dict)
    joint_step_max_deg: float | None = None
    #: the largest single-joint change of a move away from the work (HOME to an approach
    #: pose, ...), as (joint, degrees, which move); None = not known, not compared
    largest_move: tuple[int, float, str] | None = None


def wider_than_envelope(limits: RuntimeLimits, envelope: Envelope) -> list[str]:
    """Every way ``limits`` go beyond ``envelope``, one sentence each (empty: they fit)."""
    problems = []
    if limits.j1_max > envelope.joint_max[1]:
        problems.append(
            f"arm.j1_max {limits.j1_max:g} is above the envelope's j1 maximum {envelope.joint_max[1]:g}"
        )
    for name, pose in limits.poses.items():
        v = envelope.violation(pose)
        if v is not None:
            problems.append(f"{name} {[round(a, 2) for a in pose]}: {v.message()}")
    for name, (i, value) in limits.joints.items():
        lo, hi = envelope.joint_min[i], envelope.joint_max[i]
        if not lo <= value <= hi:
            problems.append(
                f"{name} {value:g} is outside the envelope's j{i} limits [{lo:g}, {hi:g}]"
            )
    step, bound = limits.joint_step_max_deg, envelope.max_step_deg
    if limits.largest_move is not None and bound is not None and limits.largest_move[1] > bound:
        j, deg, which = limits.largest_move
        problems.append(
            f"the trial's moves turn j{j} by up to {deg:.1f}° in one send ({which}), above the "
            f"envelope's per-move bound {bound:g}° (raise it above that or turn it off: the "
            "runtime bounds its moves near the work itself, arm.joint_step_max_deg)"
        )
    if step is not None and bound is not None and step > bound:
        problems.append(
            f"arm.joint_step_max_deg {step:g} is above the envelope's per-move bound {bound:g}"
        )
    return problems
