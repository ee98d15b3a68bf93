"""The simulated arm's true kinematics: the world's arm is not the runtime's model.

The runtime plans with the nominal URDF chain (``mecharm.common.kinematics``). A real
arm differs: each joint's zero is off by a little, links are not exactly the drawing's
length, the tool is not exactly 100 mm, gears have backlash and the arm sags under its
own weight and more with a block in the jaws. ``WorldArm`` applies an ``ArmTruth`` to
the encoder angles the simulated firmware reports, so the physics and the renderer put
the tool where the world's arm would, while every reading the runtime gets stays the
encoder's (docs/simulation-arm.md).

An ``ArmTruth`` gives the *magnitudes* of the errors; its ``seed`` draws the concrete
arm (each value scaled by a factor within ``1 ± spread``), so two seeds are two arms of
the same quality. ``ArmTruth()`` (all zeros) is the ideal arm: ``WorldArm`` then is
exactly the nominal FK.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from mecharm.common.kinematics import (
    JOINT_ORIGINS,
    ORIGIN_DROP_M,
    TOOL_OFFSET_M,
    fk_frames,
    fk_tip,
)
from mecharm.common.logging import get_logger

__all__ = ["ARM_TRUTHS", "LEVER_REF_M", "ArmTruth", "ConcreteArm", "WorldArm", "chain_frames"]

log = get_logger("mecharm.sim.world_arm")

_Six = tuple[float, float, float, float, float, float]
_ZERO6: _Six = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)

#: Sag figures are given for a joint whose tool tip is this far out horizontally (the
#: pick region's reach); a joint's sag scales with its actual lever (docs/simulation-arm.md).
LEVER_REF_M = 0.30


def _bounded(name: str, v: tuple[float, ...], lo: float, hi: float) -> tuple[float, ...]:
    bad = [f"{name}[{j}] = {x}" for j, x in enumerate(v) if not (lo <= x <= hi)]
    if bad:
        raise ValueError(f"{', '.join(bad)} outside {lo}..{hi}")
    return v


class ArmTruth(BaseModel):
    """How the world's arm differs from the nominal model (all zero: the ideal arm).

    Signed values (zero offsets, link and tool errors) keep their sign in every drawn
    arm; the seed only scales each by a factor within ``1 ± spread``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    zero_offset_deg: _Six = Field(
        default=_ZERO6, description="true joint angle - encoder angle, per joint (deg)"
    )
    link_error_m: _Six = Field(
        default=_ZERO6,
        description="length error of each URDF joint origin (base height, shoulder, upper "
        "arm, forearm, wrist, flange), along the origin's own direction (m)",
    )
    tool_error_m: float = Field(
        default=0.0, ge=-0.03, le=0.03, description="true tool length - 100 mm (m)"
    )
    backlash_deg: _Six = Field(
        default=_ZERO6,
        description="gear play per joint: the joint lags half of it behind the direction "
        "it last moved (deg)",
    )
    sag_deg: _Six = Field(
        default=_ZERO6,
        description="gravity sag of each joint for a tip LEVER_REF_M out, toward the side "
        "that lowers the tip (deg)",
    )
    load_sag_deg: _Six = Field(
        default=_ZERO6, description="extra sag while a block is held, same scaling (deg)"
    )
    settle_load_deg: _Six = Field(
        default=_ZERO6,
        description="extra post-move error the encoder sees while a block is held "
        "(SimArm.set_load_settle), per joint (deg)",
    )
    spread: float = Field(
        default=0.0, ge=0.0, le=1.0, description="each drawn value is the profile's x (1 ± spread)"
    )
    seed: int = Field(default=0, ge=0, description="draws the concrete arm")

    @field_validator("zero_offset_deg")
    @classmethod
    def _zero(cls, v: _Six) -> _Six:
        return _bounded("zero_offset_deg", v, -10.0, 10.0)  # type: ignore[return-value]

    @field_validator("link_error_m")
    @classmethod
    def _link(cls, v: _Six) -> _Six:
        return _bounded("link_error_m", v, -0.02, 0.02)  # type: ignore[return-value]

    @field_validator("backlash_deg", "sag_deg", "load_sag_deg", "settle_load_deg")
    @classmethod
    def _nonneg(cls, v: _Six, info: ValidationInfo) -> _Six:
        return _bounded(str(info.field_name), v, 0.0, 5.0)  # type: ignore[return-value]

    @property
    def ideal(self) -> bool:
        return (
            not any(self.zero_offset_deg)
            and not any(self.link_error_m)
            and self.tool_error_m == 0.0
            and not any(self.backlash_deg)
            and not any(self.sag_deg)
            and not any(self.load_sag_deg)
        )


#: The arm of each named profile (docs/simulation-arm.md explains the values and their signs).
ARM_TRUTHS: dict[str, ArmTruth] = {
    "ideal": ArmTruth(),
    "rig": ArmTruth(
        zero_offset_deg=(0.3, 1.6, 0.6, 0.4, 1.0, 0.5),
        link_error_m=(0.0, 0.0, 0.001, -0.001, 0.0, 0.0),
        tool_error_m=0.001,
        backlash_deg=(0.3, 0.4, 0.4, 0.3, 0.4, 0.3),
        sag_deg=(0.0, 1.1, 0.8, 0.0, 0.5, 0.0),
        load_sag_deg=(0.0, 0.5, 0.5, 0.0, 0.3, 0.0),
        settle_load_deg=(0.0, 0.3, 0.3, 0.0, 0.0, 0.0),
        spread=0.2,
        seed=0,
    ),
    "harsh": ArmTruth(
        zero_offset_deg=(0.6, 3.0, 1.2, 0.8, 1.8, 1.0),
        link_error_m=(0.0, 0.0, 0.002, -0.002, 0.0, 0.0),
        tool_error_m=0.002,
        backlash_deg=(0.8, 1.0, 1.0, 0.8, 1.0, 0.8),
        sag_deg=(0.0, 2.0, 1.5, 0.0, 0.9, 0.0),
        load_sag_deg=(0.0, 1.0, 1.0, 0.0, 0.5, 0.0),
        settle_load_deg=(0.0, 0.8, 0.8, 0.0, 0.3, 0.0),
        spread=0.3,
        seed=0,
    ),
}


@dataclass(frozen=True)
class ConcreteArm:
    """One drawn arm: the values ``WorldArm`` applies (an ``ArmTruth`` and its seed)."""

    zero_offset_deg: NDArray[np.float64]
    link_error_m: NDArray[np.float64]
    tool_m: float
    backlash_deg: NDArray[np.float64]
    sag_deg: NDArray[np.float64]
    load_sag_deg: NDArray[np.float64]

    @classmethod
    def draw(cls, truth: ArmTruth) -> ConcreteArm:
        """Scale every value by its own factor in ``1 ± spread`` from ``truth.seed``.

        The draws come in a fixed order, so adding a field later appends draws and an
        old seed keeps its arm for the fields it had.
        """
        rng = np.random.default_rng(truth.seed)

        def scaled(v: Any) -> NDArray[np.float64]:
            a = np.asarray(v, dtype=np.float64)
            return a * (1.0 + truth.spread * rng.uniform(-1.0, 1.0, a.shape))

        zero = scaled(truth.zero_offset_deg)
        link = scaled(truth.link_error_m)
        tool = float(scaled(truth.tool_error_m))
        backlash = scaled(truth.backlash_deg)
        sag = scaled(truth.sag_deg)
        load = scaled(truth.load_sag_deg)
        return cls(zero, link, TOOL_OFFSET_M + tool, backlash, sag, load)

    def origins(self) -> list[NDArray[np.float64]]:
        """The joint origins' xyz with each length error along the origin's direction."""
        out = []
        for (xyz, _rpy), err in zip(JOINT_ORIGINS, self.link_error_m, strict=True):
            p = np.asarray(xyz, dtype=np.float64)
            n = float(np.linalg.norm(p))
            out.append(p * (1.0 + err / n) if n > 0 else p)
        return out


def _rpy(r: float, p: float, y: float) -> NDArray[np.float64]:
    cr, sr, cp, sp, cy, sy = (math.cos(r), math.sin(r), math.cos(p), math.sin(p),
                              math.cos(y), math.sin(y))  # fmt: skip
    rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    m: NDArray[np.float64] = rz @ ry @ rx
    m[np.abs(m) < 1e-12] = 0.0  # as the nominal chain folds cos(pi/2)
    return m


_ORIGIN_R = [_rpy(*rpy) for _xyz, rpy in JOINT_ORIGINS]


def _to_unity(p: NDArray[np.float64]) -> NDArray[np.float64]:
    out = np.empty_like(p)
    out[..., 0] = -p[..., 1]
    out[..., 1] = p[..., 2] - ORIGIN_DROP_M
    out[..., 2] = p[..., 0]
    return out


def _walk(
    q_deg: NDArray[np.float64], origins: list[NDArray[np.float64]], tool_m: float
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """URDF joint positions (n, 6, 3), joint axes (n, 6, 3) and tip (n, 3) of the chain."""
    n = q_deg.shape[0]
    q = np.radians(q_deg)
    rot = np.broadcast_to(np.eye(3), (n, 3, 3))
    pos = np.zeros((n, 3))
    joints = np.empty((n, 6, 3))
    axes = np.empty((n, 6, 3))
    for i in range(6):
        pos = pos + rot @ origins[i]
        rot = rot @ _ORIGIN_R[i]
        joints[:, i], axes[:, i] = pos, rot[:, :, 2]
        c, s = np.cos(q[:, i]), np.sin(q[:, i])
        rz = np.zeros((n, 3, 3))
        rz[:, 0, 0], rz[:, 0, 1], rz[:, 1, 0], rz[:, 1, 1], rz[:, 2, 2] = c, -s, s, c, 1.0
        rot = rot @ rz
    tip = pos + tool_m * rot[:, :, 2]
    return joints, axes, tip


def chain_frames(
    angles_deg: ArrayLike,
    origins: list[NDArray[np.float64]] | None = None,
    tool_m: float = TOOL_OFFSET_M,
) -> NDArray[np.float64]:
    """``fk_frames`` of a chain whose joint origins' xyz and tool length are given.

    With the nominal origins and tool this equals ``fk_frames`` (to float rounding);
    shape (..., 8, 3): base, six joint frames, tool tip, Unity frame.
    """
    a = np.asarray(angles_deg, dtype=np.float64)
    if a.shape[-1:] != (6,):
        raise ValueError(f"angles_deg must have 6 values in its last axis, got shape {a.shape}")
    lead = a.shape[:-1]
    if origins is None:
        origins = [np.asarray(xyz, dtype=np.float64) for xyz, _rpy in JOINT_ORIGINS]
    joints, _axes, tip = _walk(a.reshape(-1, 6), origins, tool_m)
    pts = np.concatenate([np.zeros((len(tip), 1, 3)), joints, tip[:, None, :]], axis=1)
    return _to_unity(pts).reshape(*lead, 8, 3)


class WorldArm:
    """Encoder angles -> where the world's arm really is (joint frames and tool tip).

    ``arm`` (a SimArm) is followed through its "send" events to know each joint's last
    direction of motion (backlash); ``holding`` says whether a block is in the jaws
    (load sag). Both are optional: without them no backlash side is known yet and no
    block is held. Thread-safe: the physics thread and the renderers call it.
    """

    def __init__(
        self,
        truth: ArmTruth | None = None,
        arm: Any = None,
        holding: Callable[[], bool] | None = None,
    ) -> None:
        self.truth = truth or ArmTruth()
        self.arm = arm
        self.holding = holding
        self.concrete = ConcreteArm.draw(self.truth)
        self._origins = self.concrete.origins()
        self._ideal = self.truth.ideal
        self._lock = threading.Lock()
        self._direction = np.zeros(6)  # +1 / -1: the side each joint last moved to; 0: unknown
        if not self._ideal:
            c = self.concrete
            log.info(
                "world_arm",
                seed=self.truth.seed,
                zero_offset_deg=[round(float(v), 3) for v in c.zero_offset_deg],
                link_error_mm=[round(float(v) * 1000, 2) for v in c.link_error_m],
                tool_mm=round(c.tool_m * 1000, 2),
                backlash_deg=[round(float(v), 3) for v in c.backlash_deg],
                sag_deg=[round(float(v), 3) for v in c.sag_deg],
                load_sag_deg=[round(float(v), 3) for v in c.load_sag_deg],
            )
        if arm is not None and not self._ideal and any(self.truth.backlash_deg):
            arm.add_listener(self._on_arm_event)
        if arm is not None and any(self.truth.settle_load_deg) and hasattr(arm, "set_load_settle"):
            arm.set_load_settle(self.truth.settle_load_deg)

    def detach(self) -> None:
        """Stop following the arm's sends (the workcell closes)."""
        if self.arm is not None:
            self.arm.remove_listener(self._on_arm_event)

    # ------------------------------------------------------------ backlash side
    def _on_arm_event(self, kind: str, data: dict[str, Any]) -> None:
        if kind != "send" or not data.get("accepted", True):
            return
        target = np.asarray(data["angles"], dtype=np.float64)
        start = data.get("from")
        now = np.asarray(start if start is not None else self.arm.true_angles(), dtype=np.float64)
        self.note_move(now, target)

    def note_move(self, start: ArrayLike, target: ArrayLike) -> None:
        """A move from ``start`` to ``target`` began: the joints that move take up their play
        on that side (a joint that holds keeps its side)."""
        d = np.asarray(target, dtype=np.float64) - np.asarray(start, dtype=np.float64)
        with self._lock:
            moving = np.abs(d) > 0.05
            self._direction = np.where(moving, np.sign(d), self._direction)

    @property
    def direction(self) -> NDArray[np.float64]:
        with self._lock:
            return self._direction.copy()

    @property
    def sides(self) -> tuple[float, ...]:
        """``direction`` as a key: where the arm is drawn and its tip is depends on it as well
        as on the angles, and a send turns it before the arm moves (the still-arm shortcuts of
        the physics and the cameras key on it; docs/simulation-optics.md)."""
        with self._lock:
            return tuple(self._direction.tolist())

    # ------------------------------------------------------------ the true joint angles
    def _held(self, holding: bool | None) -> bool:
        if holding is not None:
            return holding
        return bool(self.holding()) if self.holding is not None else False

    def joint_angles(
        self,
        angles_deg: ArrayLike,
        *,
        holding: bool | None = None,
        direction: ArrayLike | None = None,
    ) -> NDArray[np.float64]:
        """The joints' true angles for encoder readings ``angles_deg`` (shape (..., 6)).

        ``holding`` and ``direction`` (each joint's last side of motion, +1/-1/0) default
        to what the arm is doing now; the measuring tool (``tip_error_table``) sets them.
        """
        a = np.asarray(angles_deg, dtype=np.float64)
        if self._ideal:
            return a
        c = self.concrete
        lead = a.shape[:-1]
        flat = a.reshape(-1, 6)
        side = self.direction if direction is None else np.asarray(direction, dtype=np.float64)
        q = flat + c.zero_offset_deg - side * c.backlash_deg / 2.0
        sag = c.sag_deg + (c.load_sag_deg if self._held(holding) else 0.0)
        if np.any(sag):
            q = q - sag * self._lever_y(q) / LEVER_REF_M
        return q.reshape(*lead, 6)

    def _lever_y(self, q: NDArray[np.float64]) -> NDArray[np.float64]:
        """d(tip height)/d(joint angle) in m/rad, shape (n, 6): each joint's signed lever."""
        joints, axes, tip = _walk(q, self._origins, self.concrete.tool_m)
        return np.cross(axes, tip[:, None, :] - joints)[..., 2]

    # ------------------------------------------------------------ where it is
    def frames(self, angles_deg: ArrayLike, **kw: Any) -> NDArray[np.float64]:
        """Base, joint frames and tool tip, shape (..., 8, 3) like ``fk_frames``."""
        if self._ideal:
            return fk_frames(angles_deg)
        return chain_frames(
            self.joint_angles(angles_deg, **kw), self._origins, self.concrete.tool_m
        )

    def tip(self, angles_deg: ArrayLike, **kw: Any) -> NDArray[np.float64]:
        """The true tool tip, shape (..., 3) like ``fk_tip``."""
        if self._ideal:
            return fk_tip(angles_deg)
        return self.frames(angles_deg, **kw)[..., 7, :]
