"""The runtime's seams to the outside world, as small protocols.

Why: every input the stage machine uses (angle readings, camera detections, tip
measurements, block positions, verdicts, side frames) comes through one of these
ports. The live run plugs in the daemon and the cameras, ``--dry-run`` plugs in an
arm that records instead of moving, and ``mecharm replay`` plugs in ports that
return what a trace recorded — the decision logic is the same code in all three.
Time enters only through ``Clock`` and through the timestamp of each reading.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import anyio

__all__ = [
    "ArmPort",
    "Clock",
    "EyesPort",
    "Reading",
    "RealClock",
    "ReleaseView",
    "SceneObservation",
    "Sent",
    "StillClock",
    "TipObservation",
    "VerdictObservation",
]


@dataclass(frozen=True)
class Reading:
    """One ``get_angles`` attempt: the angles (None when the arm gave no reading, with
    ``error`` saying why), the monotonic time (s) its answer came, and the time it was
    asked for (``t_asked``; None where unknown: a trace written before it was kept).

    The arm was where the answer says at some moment between the two; a decision "has it
    arrived by the deadline?" needs a reading asked for after the deadline, because one
    asked for before it and answered late shows the arm as it was before."""

    angles: tuple[float, ...] | None
    t: float
    error: str = ""
    t_asked: float | None = None

    @property
    def asked(self) -> float:
        """When the reading was asked for (its answer's time where that is not known)."""
        return self.t if self.t_asked is None else self.t_asked

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "angles": list(self.angles) if self.angles is not None else None,
            "t": self.t,
            "error": self.error,
        }
        if self.t_asked is not None:
            d["t_asked"] = self.t_asked
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Reading:
        """Rebuild a reading from its trace form (replay)."""
        a = d.get("angles")
        asked = d.get("t_asked")
        return cls(
            tuple(float(x) for x in a) if a is not None else None,
            float(d["t"]),
            str(d.get("error", "")),
            float(asked) if asked is not None else None,
        )


@dataclass(frozen=True)
class Sent:
    """One pose send as it went on the wire: the angles the daemon reports it sent
    (the SDK truncates to 0.01°) and the monotonic time (s) the send completed.
    This, not the request, is what the dataset records as the action."""

    t: float
    angles: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"t": self.t, "angles": list(self.angles)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Sent:
        a = d["angles"]
        if not isinstance(a, list) or len(a) != 6:
            raise ValueError(f"expected 6 sent angles, got {a!r}")
        return cls(float(d["t"]), tuple(float(x) for x in a))


@runtime_checkable
class ArmPort(Protocol):
    """The arm as the stage machine sees it.

    ``read_angles`` reports an arm that gave no reading inside the Reading (not as an
    exception) so every reading, good or not, carries its time. ``send_angles``
    returns what went on the wire and when (``Sent``). Lost connections, timeouts and
    refusals raise the daemon client's errors (client.py).
    """

    async def read_angles(self) -> Reading: ...
    async def send_angles(self, angles: Sequence[float], speed: int) -> Sent: ...
    async def set_gripper_state(self, state: int, speed: int) -> None: ...
    async def set_gripper_value(self, value: int, speed: int) -> None: ...
    async def set_fresh_mode(self, mode: int) -> None: ...
    async def stop(self) -> None: ...


@dataclass(frozen=True)
class SceneObservation:
    """The detect stage's result: block and box on the mat (Unity x, z metres) from the same captures.

    ``box_trusted`` False: the box detection doubts itself even after the retries
    (``box_doubt`` says why; docs/perception.md, "Detections that doubt themselves").
    Written to the trace only when False, so traces from before the flag read as trusted."""

    ok: bool
    reason: str = ""
    block_xz: tuple[float, float] | None = None
    box_xz: tuple[float, float] | None = None
    box_score: float | None = None
    box_method: str = ""
    repeats: list[dict[str, Any]] = field(default_factory=list)
    captures: list[str] = field(default_factory=list)
    box_trusted: bool = True
    box_doubt: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = {
            "ok": self.ok, "reason": self.reason,
            "block_xz": list(self.block_xz) if self.block_xz else None,
            "box_xz": list(self.box_xz) if self.box_xz else None,
            "box_score": self.box_score, "box_method": self.box_method,
            "repeats": self.repeats, "captures": self.captures,
        }  # fmt: skip
        if not self.box_trusted:
            d["box_trusted"] = False
            d["box_doubt"] = self.box_doubt
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SceneObservation:
        def xz(v: Any) -> tuple[float, float] | None:
            return None if v is None else (float(v[0]), float(v[1]))

        return cls(
            bool(d["ok"]),
            str(d.get("reason", "")),
            xz(d.get("block_xz")),
            xz(d.get("box_xz")),
            d.get("box_score"),
            str(d.get("box_method", "")),
            list(d.get("repeats", [])),
            list(d.get("captures", [])),
            bool(d.get("box_trusted", True)),
            str(d.get("box_doubt", "")),
        )


@dataclass(frozen=True)
class TipObservation:
    """Tip vs block after the pick descend, from the top camera (mm); ok=False when not measurable."""

    ok: bool
    dx_mm: float = 0.0
    dz_mm: float = 0.0
    dist_mm: float = 0.0
    reason: str = ""
    capture: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "dx_mm": self.dx_mm, "dz_mm": self.dz_mm, "dist_mm": self.dist_mm,
                "reason": self.reason, "capture": self.capture}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TipObservation:
        return cls(
            bool(d["ok"]),
            float(d.get("dx_mm", 0.0)),
            float(d.get("dz_mm", 0.0)),
            float(d.get("dist_mm", 0.0)),
            str(d.get("reason", "")),
            str(d.get("capture", "")),
        )


@dataclass(frozen=True)
class VerdictObservation:
    verdict: str  # "yes" | "no"
    confidence: float
    reason: str
    judge: str
    #: how the judge came to it (the VLM judge: vlm_verdict, dist_override, raw, fallback ...)
    details: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "verdict": self.verdict,
            "confidence": self.confidence,
            "reason": self.reason,
            "judge": self.judge,
        }
        if self.details:
            d["details"] = self.details
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> VerdictObservation:
        details = d.get("details")
        return cls(str(d["verdict"]), float(d["confidence"]), str(d["reason"]), str(d["judge"]),
                   dict(details) if isinstance(details, dict) else {})  # fmt: skip


@dataclass(frozen=True)
class ReleaseView:
    """Is the held block above the box's opening, just before the release (docs/stages.md, "release")?

    Top camera: in how many of ``top_frames`` the red block was found near the box at
    its held height, its median (x, z), distance to the box centre and ``margin_mm``
    (how far its farthest corner lies inside the box's inner footprint; negative:
    outside), all against the box as found again in the same frames (``box_xz``,
    ``box_method``; ``box_moved_mm`` from where detect saw it; ``box_refound`` False: not
    found again, detect's box was used). Side camera (the recorder's frame, when there is
    one): ``side`` is ``seen`` (red block above the white box), ``not_seen``, or
    ``no_frame`` with ``side_reason`` saying why; what a side view can judge is in
    docs/release.md.
    """

    top_seen: int
    top_frames: int
    block_xz: tuple[float, float] | None = None
    dist_mm: float | None = None
    margin_mm: float | None = None
    side: str = "no_frame"  # seen | not_seen | no_frame
    side_reason: str = ""
    capture: str = ""
    box_xz: tuple[float, float] | None = None
    box_method: str = ""
    box_moved_mm: float | None = None
    box_refound: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "top_seen": self.top_seen, "top_frames": self.top_frames,
            "block_xz": list(self.block_xz) if self.block_xz else None,
            "dist_mm": self.dist_mm, "margin_mm": self.margin_mm,
            "side": self.side, "side_reason": self.side_reason, "capture": self.capture,
            "box_xz": list(self.box_xz) if self.box_xz else None, "box_method": self.box_method,
            "box_moved_mm": self.box_moved_mm, "box_refound": self.box_refound,
        }  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ReleaseView:
        xz = d.get("block_xz")

        def num(v: Any) -> float | None:
            return None if v is None else float(v)

        side = str(d.get("side", "no_frame"))
        if side not in ("seen", "not_seen", "no_frame"):
            raise ValueError(f"release view side must be seen|not_seen|no_frame, got {side!r}")
        return cls(
            int(d["top_seen"]),
            int(d["top_frames"]),
            None if xz is None else (float(xz[0]), float(xz[1])),
            num(d.get("dist_mm")),
            num(d.get("margin_mm")),
            side,
            str(d.get("side_reason", "")),
            str(d.get("capture", "")),
            _xz(d.get("box_xz")),
            str(d.get("box_method", "")),
            num(d.get("box_moved_mm")),
            bool(d.get("box_refound", False)),
        )


def _xz(v: Any) -> tuple[float, float] | None:
    """An (x, z) pair from a trace value (None stays None; a view traced before the field)."""
    return None if v is None else (float(v[0]), float(v[1]))


class EyesPort(Protocol):
    """The top camera and the perception on it (the runtime owns the top camera)."""

    def start_trial(self, run_dir: Path | None) -> None: ...
    async def observe_scene(self, tag: str) -> SceneObservation: ...
    async def measure_tip(
        self, block_xz: tuple[float, float], tip_height_m: float, tag: str
    ) -> TipObservation: ...
    async def locate_block(
        self, lift_m: float, near_xz: tuple[float, float], tag: str
    ) -> tuple[float, float] | None:
        """The held block's (x, z); ``lift_m`` = how far the tip is above where it grasped."""
        ...

    async def judge_pick(self, tip_height_m: float, tag: str) -> VerdictObservation: ...
    async def judge_place(self, side_frame: str | None, tag: str) -> VerdictObservation: ...
    async def look_place(self, tag: str) -> VerdictObservation:
        """Is the block in the box, looked at during a task (a rollout after the policy lets
        go), not the trial's verdict: the geometric judge whatever judges the trial (no VLM
        call from the trial's budget, no question to the operator)."""
        ...

    async def view_release(
        self, lift_m: float, box_xz: tuple[float, float], side_frame: str | None, tag: str
    ) -> ReleaseView:
        """The block held ``lift_m`` above where it was grasped, seen over the box before release."""
        ...

    async def ask_release(self, why: str, tag: str) -> VerdictObservation:
        """The operator's answer to "release anyway?" ("yes" = release); "no" when nobody is asked."""
        ...

    async def close(self) -> None: ...


class Clock(Protocol):
    def now(self) -> float: ...
    def wall(self) -> float: ...
    async def sleep(self, seconds: float) -> None: ...


class RealClock:
    """Monotonic time for decisions, wall time for event timestamps (one clock with the recorder)."""

    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        if seconds > 0:
            await anyio.sleep(seconds)


class StillClock:
    """Replay time: ``now`` and ``wall`` stand still and sleeps return at once, so decisions
    rest only on the times the arm port's recorded readings and sends carry."""

    def now(self) -> float:
        return 0.0

    def wall(self) -> float:
        return 0.0

    async def sleep(self, seconds: float) -> None:
        return None
