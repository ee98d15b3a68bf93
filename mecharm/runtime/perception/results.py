"""Result types of perception; every one serializes with ``.to_dict()`` for the run log and trace."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = ["BlockDetection", "BoxDetection", "SceneDetection", "TipMeasurement", "Verdict"]


def _r(v: float, nd: int = 5) -> float:
    return round(float(v), nd)


@dataclass(frozen=True)
class BlockDetection:
    """Red block centre on the mat (metres, Unity x/z), seen through its top face."""

    x: float
    z: float
    yaw_deg: float  # of the top face's square, 0..90
    u: float  # pixel of the top-face centre
    v: float
    area_mm2: float  # of the top face, on its own plane
    height_m: float  # plane the top face was mapped through

    def to_dict(self) -> dict[str, Any]:
        return {k: _r(v) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class BoxDetection:
    """White box centre (metres); ``method`` tells how it was found, ``score`` how well (0..1).

    ``trusted`` is False when the detection doubts itself (``doubt`` says why): the
    configured fallback, a template hit away from every white blob, or samples of one
    detect that disagree. The runtime does not place at an untrusted box
    (docs/perception.md, "Detections that doubt themselves").
    """

    x: float
    z: float
    yaw_deg: float
    score: float
    method: Literal["contour", "template", "fallback"]
    u: float | None = None
    v: float | None = None
    size_mm: tuple[float, float] | None = None
    reason: str = ""
    trusted: bool = True
    doubt: str = ""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "x": _r(self.x),
            "z": _r(self.z),
            "yaw_deg": _r(self.yaw_deg, 2),
            "score": _r(self.score, 4),
            "method": self.method,
            "u": None if self.u is None else _r(self.u, 2),
            "v": None if self.v is None else _r(self.v, 2),
            "size_mm": None if self.size_mm is None else [_r(s, 2) for s in self.size_mm],
        }
        if self.reason:
            d["reason"] = self.reason
        d["trusted"] = self.trusted
        if self.doubt:
            d["doubt"] = self.doubt
        return d


@dataclass(frozen=True)
class SceneDetection:
    """Block and box combined over DETECT_REPEAT captures (median), with every sample kept."""

    block: BlockDetection | None
    box: BoxDetection
    block_samples: list[BlockDetection | None] = field(default_factory=list)
    box_samples: list[BoxDetection] = field(default_factory=list)
    block_spread_mm: float | None = None  # max distance of a sample from the combined position
    box_spread_mm: float | None = None

    @property
    def repeats(self) -> int:
        return len(self.box_samples)

    def to_dict(self) -> dict[str, Any]:
        return {
            "block": None if self.block is None else self.block.to_dict(),
            "box": self.box.to_dict(),
            "repeats": self.repeats,
            "block_found": sum(b is not None for b in self.block_samples),
            "block_spread_mm": None
            if self.block_spread_mm is None
            else _r(self.block_spread_mm, 3),
            "box_spread_mm": None if self.box_spread_mm is None else _r(self.box_spread_mm, 3),
            "block_samples": [None if b is None else b.to_dict() for b in self.block_samples],
            "box_samples": [b.to_dict() for b in self.box_samples],
        }


@dataclass(frozen=True)
class TipMeasurement:
    """Gripper tip vs block after the pick descend: offsets tip - block in millimetres."""

    tip_x: float
    tip_z: float
    block_x: float
    block_z: float
    dx_mm: float
    dz_mm: float
    dist_mm: float
    u: float
    v: float
    tip_height_m: float

    def to_dict(self) -> dict[str, Any]:
        return {k: _r(v, 3 if k.endswith("_mm") else 5) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class Verdict:
    """A judge's answer: ``verdict`` yes/no with a confidence in 0..1 and the reason in words."""

    verdict: Literal["yes", "no"]
    confidence: float
    reason: str
    judge: str
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.verdict not in ("yes", "no"):
            raise ValueError(f"verdict must be 'yes' or 'no', got {self.verdict!r}")
        if not 0.0 <= self.confidence <= 1.0:
            raise ValueError(f"confidence must be within 0..1, got {self.confidence!r}")

    @property
    def yes(self) -> bool:
        return self.verdict == "yes"

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "confidence": _r(self.confidence, 4),
            "reason": self.reason,
            "judge": self.judge,
            "details": self.details,
        }
