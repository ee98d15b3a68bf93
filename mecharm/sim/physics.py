"""Deterministic, rule-based physics of the workcell: grasp, carry, release, drop, collisions.

Only what matters on the rig is modelled (tolerances in docs/workcell.md):

* **grasp**: when the gripper is commanded to close past the block width
  (value < ``GRIP_CONTACT``) with the jaws open wider than the block, the block
  is grasped iff the tool tip is within ``GRASP_XZ_TOL_M`` of the block centre
  horizontally and ``tip_y - block_bottom`` lies in ``GRASP_Y_RANGE_M``; the
  jaws then stop at the block (``SimArm.block_gripper_at``). Otherwise: a miss.
* **carry**: a grasped block keeps its offset to the tip.
* **release**: opening the gripper drops the block straight down: into the box
  when its whole footprint is over the inner footprint, onto the rim when it
  overlaps a wall (a failed place), onto the mat otherwise.
* **collision**: the tip (or a held block) below the rim over a box wall, the
  tip below the box floor inside it, or the tip below the mat. Each start of
  a contact is recorded once with its kind, tip position and joint angles.

The physics samples the arm's true joint state (``step``, called by a 100 Hz
thread and before every rendered frame) and interpolates between samples so a
fast move cannot pass through a wall unseen.
"""

from __future__ import annotations

import math
import time
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from mecharm.common.logging import get_logger
from mecharm.sim.contact import ContactProfile
from mecharm.sim.scene import (
    BLOCK_SIZE_M,
    BOX_FLOOR_M,
    BOX_HEIGHT_M,
    BOX_INNER_M,
    BOX_OUTER_M,
    SceneState,
)
from mecharm.sim.world_arm import WorldArm

__all__ = [
    "FINGER_RADIUS_M",
    "GRASP_XZ_TOL_M",
    "GRASP_Y_RANGE_M",
    "GRIP_CONTACT",
    "ArmState",
    "Physics",
    "WorkcellPhysics",
    "classify_drop",
    "make_physics",
]

log = get_logger("mecharm.sim.physics")

GRIP_CONTACT = 45.0  # gripper value at which the jaws touch a 25 mm block (55 mm fully open)
GRASP_XZ_TOL_M = 0.012
GRASP_Y_RANGE_M = (-0.002, 0.045)
FINGER_RADIUS_M = 0.004  # the fingertips' half thickness, for wall contact
_SUBSTEPS = 6


class ArmState(Protocol):
    def true_angles(self) -> tuple[float, ...]: ...

    def true_gripper(self) -> float: ...

    def add_listener(self, cb: Any) -> None: ...

    def remove_listener(self, cb: Any) -> None: ...

    def block_gripper_at(self, value: float | None) -> None: ...


class WorkcellPhysics(Protocol):
    """What the workcell (and the fault interface) asks of a contact engine."""

    def step(self) -> None: ...

    def reset(self) -> None: ...

    def detach(self) -> None: ...

    def force_miss_next_grasp(self) -> None: ...

    def cancel_missed_grasp(self) -> None: ...

    @property
    def missed_grasp_armed(self) -> bool: ...

    def knock_block(self, dx_m: float, dz_m: float) -> dict[str, Any]: ...

    def push_box(self, dx_m: float, dz_m: float) -> dict[str, Any]: ...


def _moved_mm(dx_m: float, dz_m: float) -> dict[str, float]:
    """A fault's displacement as its event records it (mm, 0.1 mm)."""
    return {"dx_mm": round(dx_m * 1000, 1), "dz_mm": round(dz_m * 1000, 1)}


def make_physics(
    scene: SceneState, arm: ArmState, world: WorldArm, contact: ContactProfile
) -> WorkcellPhysics:
    """The engine the profile's contact part names: ``rules`` (this module) or ``mujoco``."""
    if contact.engine == "mujoco":
        from mecharm.sim.mujoco_physics import MujocoPhysics  # MuJoCo only when asked for

        return MujocoPhysics(scene, arm, world=world, contact=contact)
    return Physics(scene, arm, world=world)


def _box_local(xz: NDArray[np.float64], box: tuple[float, float, float]) -> NDArray[np.float64]:
    """World (N, 2) x/z -> box-local coordinates (the box's sides along the axes)."""
    a = math.radians(box[2])
    c, s = math.cos(a), math.sin(a)
    rel = np.asarray(xz, dtype=np.float64).reshape(-1, 2) - [box[0], box[1]]
    return np.column_stack([c * rel[:, 0] + s * rel[:, 1], -s * rel[:, 0] + c * rel[:, 1]])


def _block_corners(cx: float, cz: float, yaw_deg: float) -> NDArray[np.float64]:
    h = BLOCK_SIZE_M / 2
    a = math.radians(yaw_deg)
    c, s = math.cos(a), math.sin(a)
    local = np.array([[h, h], [-h, h], [-h, -h], [h, -h]])
    return local @ np.array([[c, -s], [s, c]]).T + [cx, cz]


def classify_drop(cx: float, cz: float, yaw_deg: float, box: tuple[float, float, float]) -> str:
    """Where a block released above (cx, cz) lands: ``box``, ``rim`` or ``mat``."""
    local = _box_local(_block_corners(cx, cz, yaw_deg), box)
    cheb = np.max(np.abs(local), axis=1)
    if np.all(cheb <= BOX_INNER_M / 2):
        return "box"
    # any part of the block over the walls' band -> it rests on the rim
    lo, hi = local.min(axis=0), local.max(axis=0)
    overlaps_outer = np.all(hi >= -BOX_OUTER_M / 2) and np.all(lo <= BOX_OUTER_M / 2)
    return "rim" if overlaps_outer else "mat"


def _wall_contact(
    xz: NDArray[np.float64], box: tuple[float, float, float], r: float
) -> NDArray[np.bool_]:
    cheb = np.max(np.abs(_box_local(xz, box)), axis=1)
    return (cheb >= BOX_INNER_M / 2 - r) & (cheb <= BOX_OUTER_M / 2 + r)


class ContactEngineBase:
    """What both contact engines (``Physics`` and ``mujoco_physics.MujocoPhysics``) do alike:
    react to the gripper's commands, and the ``missed_grasp`` fault (each engine checks
    ``_forced_miss`` when the jaws close). An engine says whether it holds the block
    (``_holding``), how it tries a grasp and how it lets go."""

    scene: SceneState
    _forced_miss: bool

    def step(self) -> None:
        raise NotImplementedError

    def _holding(self) -> bool:
        raise NotImplementedError

    def _try_grasp(self, jaws: float) -> None:
        raise NotImplementedError

    def _open(self) -> None:
        raise NotImplementedError

    def on_arm_event(self, kind: str, data: dict[str, Any]) -> None:
        if kind != "gripper":
            return
        # the jaws may already be moving when we hear of it (the arm reacts within a few ms of
        # real time at high time scales): take the wider of the last sample and now
        before = self.scene.gripper
        self.step()
        target = float(data.get("target", 100.0))
        with self.scene.lock:
            held = self._holding()
            if target < GRIP_CONTACT and not held:
                self._try_grasp(max(before, self.scene.gripper))
            elif target > GRIP_CONTACT and held:
                self._open()

    def force_miss_next_grasp(self) -> None:
        """Fault: the next close misses (the jaws close past the block, which stays)."""
        with self.scene.lock:
            self._forced_miss = True
        log.warning("workcell_fault", fault="force_miss_next_grasp")

    def cancel_missed_grasp(self) -> None:
        """Disarm ``force_miss_next_grasp`` if it has not taken effect yet."""
        with self.scene.lock:
            self._forced_miss = False

    @property
    def missed_grasp_armed(self) -> bool:
        return self._forced_miss


class Physics(ContactEngineBase):
    """Advances the scene from the arm's true state. Thread-safe through the scene lock."""

    def __init__(
        self,
        scene: SceneState,
        arm: ArmState,
        clock: Any = time.time,
        world: WorldArm | None = None,
    ) -> None:
        self.scene = scene
        self.arm = arm
        self.world = world or WorldArm()  # where the tool really is (docs/simulation.md)
        self.clock = clock
        self._last_angles: tuple[float, ...] | None = None
        #: what the last step read, while the arm stood still: the same again changes nothing
        self._still: tuple[Any, ...] | None = None
        self._contact: set[str] = set()
        self._forced_miss = False
        arm.add_listener(self.on_arm_event)

    def detach(self) -> None:
        self.arm.remove_listener(self.on_arm_event)
        self.arm.block_gripper_at(None)

    def reset(self) -> None:
        """Forget contacts and jaw blocking (a new scene was laid out)."""
        with self.scene.lock:
            self._contact.clear()
            self._last_angles = None
            self._still = None
            self._forced_miss = False
            self.arm.block_gripper_at(None)
        self.step()

    # ---------------------------------------------------------------- events from the arm
    def _holding(self) -> bool:
        return self.scene.grasped

    def _open(self) -> None:
        self._release()

    def _event(self, kind: str, **data: Any) -> None:
        ev = {"kind": kind, "ts": self.clock(), **data}
        self.scene.events.append(ev)
        log.info(f"workcell_{kind}", **data)

    def _moved(self, kind: str, dx_m: float, dz_m: float) -> dict[str, Any]:
        """A fault that moved something on the mat (knock, push_box): its event, logged loud."""
        ev = {"kind": kind, "ts": self.clock(), **_moved_mm(dx_m, dz_m)}
        self.scene.events.append(ev)
        log.warning(f"workcell_{kind}", dx_mm=ev["dx_mm"], dz_mm=ev["dz_mm"])
        return ev

    def _try_grasp(self, jaws: float) -> None:
        sc = self.scene
        tip = np.array(self.world.tip(self.arm.true_angles()))
        bx, by, bz = sc.block_xyz
        dxz = math.hypot(tip[0] - bx, tip[2] - bz)
        dy = float(tip[1] - (by - BLOCK_SIZE_M / 2))
        info = {
            "tip": [round(float(v), 4) for v in tip],
            "dxz_mm": round(dxz * 1000, 1),
            "tip_above_block_bottom_mm": round(dy * 1000, 1),
            "jaws": round(jaws, 1),
        }
        if self._forced_miss:
            self._forced_miss = False
            self._event("miss", reason="forced miss (fault: force_miss_next_grasp)", **info)
        elif jaws < GRIP_CONTACT:
            self._event("miss", reason="jaws were not open wider than the block", **info)
        elif dxz > GRASP_XZ_TOL_M:
            self._event(
                "miss",
                reason=f"tip {dxz * 1000:.1f} mm from the block centre (tolerance "
                f"{GRASP_XZ_TOL_M * 1000:.0f} mm)",
                **info,
            )
        elif not GRASP_Y_RANGE_M[0] <= dy <= GRASP_Y_RANGE_M[1]:
            self._event(
                "miss",
                reason=f"tip {dy * 1000:.1f} mm above the block's bottom (needs "
                f"{GRASP_Y_RANGE_M[0] * 1000:.0f}..{GRASP_Y_RANGE_M[1] * 1000:.0f} mm)",
                **info,
            )
        else:
            sc.grasped = True
            sc.resting_on = "gripper"
            sc.grasp_offset = (bx - float(tip[0]), by - float(tip[1]), bz - float(tip[2]))
            sc.bump()
            self.arm.block_gripper_at(GRIP_CONTACT)
            self._event("grasp", **info)

    def _release(self) -> None:
        sc = self.scene
        bx, by, bz = sc.block_xyz
        where = classify_drop(bx, bz, sc.block_yaw_deg, sc.box)
        bottom = {"box": BOX_FLOOR_M, "rim": BOX_HEIGHT_M, "mat": 0.0}[where]
        sc.block_xyz = [bx, bottom + BLOCK_SIZE_M / 2, bz]
        sc.grasped = False
        sc.resting_on = where
        sc.place_outcome = where
        sc.bump()
        self.arm.block_gripper_at(None)
        self._event(
            "release",
            landed=where,
            block=[round(bx, 4), round(bz, 4)],
            drop_mm=round((by - BLOCK_SIZE_M / 2 - bottom) * 1000, 1),
        )

    # ---------------------------------------------------------------- faults
    def knock_block(self, dx_m: float, dz_m: float) -> dict[str, Any]:
        """Fault: the block (not held) is pushed by (dx, dz) metres, as if knocked; it keeps
        its height and yaw. Raises ValueError while it is in the jaws."""
        with self.scene.lock:
            sc = self.scene
            if sc.grasped:
                raise ValueError("knock_block: the block is in the gripper; knock it once released")
            sc.block_xyz = [sc.block_xyz[0] + dx_m, sc.block_xyz[1], sc.block_xyz[2] + dz_m]
            sc.bump()
            return self._moved("knock", dx_m, dz_m)

    def push_box(self, dx_m: float, dz_m: float) -> dict[str, Any]:
        """Fault: the box slides by (dx, dz) metres on the mat, as when the arm pushes it; it
        keeps its yaw. Raises ValueError while the block lies in it (push it before the place)."""
        with self.scene.lock:
            sc = self.scene
            if sc.resting_on in ("box", "rim") and not sc.grasped:
                raise ValueError("push_box: the block lies in the box; push it before the place")
            x, z, yaw = sc.box
            sc.box = (x + dx_m, z + dz_m, yaw)
            sc.bump()
            return self._moved("push_box", dx_m, dz_m)

    # ---------------------------------------------------------------- stepping
    def step(self) -> None:
        """Sample the arm now: move a held block with the tip, detect collisions."""
        angles = tuple(self.arm.true_angles())
        grip = float(self.arm.true_gripper())
        with self.scene.lock:
            sc = self.scene
            # an idle workcell steps 100 times a second; with the arm still and the scene
            # unchanged (every change bumps its version) a step finds what the last one did
            # (the joints' play too: a send turns it before the arm moves)
            offset, sides = tuple(sc.grasp_offset), self.world.sides
            still = (angles, grip, sc.version, sc.grasped, offset, sc.box, sides)
            if still == self._still:
                return
            self._still = still if angles == self._last_angles else None
            prev = self._last_angles if self._last_angles is not None else angles
            self._last_angles = angles
            qs = np.linspace(prev, angles, _SUBSTEPS) if prev != angles else np.array([angles])
            tips = self.world.tip(qs)
            tip = tips[-1]
            sc.tip_xyz = (float(tip[0]), float(tip[1]), float(tip[2]))
            sc.gripper = grip
            if sc.grasped:
                ox, oy, oz = sc.grasp_offset
                sc.block_xyz = [float(tip[0]) + ox, float(tip[1]) + oy, float(tip[2]) + oz]
            self._collisions(tips, qs)

    def _collisions(self, tips: NDArray[np.float64], qs: NDArray[np.float64]) -> None:
        sc = self.scene
        xz = tips[:, [0, 2]]
        y = tips[:, 1]
        inside = np.max(np.abs(_box_local(xz, sc.box)), axis=1) < BOX_INNER_M / 2 - FINGER_RADIUS_M
        kinds: dict[str, NDArray[np.bool_]] = {
            "box_wall": _wall_contact(xz, sc.box, FINGER_RADIUS_M) & (y < BOX_HEIGHT_M),
            "box_floor": inside & (y < BOX_FLOOR_M),
            "mat": y < -0.002,
        }
        if sc.grasped:
            ox, oy, oz = sc.grasp_offset
            bottoms = y + oy - BLOCK_SIZE_M / 2
            hit = np.zeros(len(tips), bool)
            for k in range(len(tips)):
                if bottoms[k] < BOX_HEIGHT_M:
                    corners = _block_corners(tips[k, 0] + ox, tips[k, 2] + oz, sc.block_yaw_deg)
                    local = _box_local(corners, sc.box)
                    lo, hi = local.min(axis=0), local.max(axis=0)
                    over_outer = np.all(hi >= -BOX_OUTER_M / 2) and np.all(lo <= BOX_OUTER_M / 2)
                    fully_in = np.all(np.max(np.abs(local), axis=1) <= BOX_INNER_M / 2)
                    hit[k] = bool(over_outer and not fully_in)
            kinds["box_wall_with_block"] = hit
        for k in range(
            len(tips)
        ):  # in time order, so leaving and re-entering within one step counts
            for kind, hits in kinds.items():
                if not hits[k]:
                    self._contact.discard(kind)
                elif kind not in self._contact:
                    self._contact.add(kind)
                    ev = {
                        "kind": kind,
                        "ts": self.clock(),
                        "tip": [round(float(v), 4) for v in tips[k]],
                        "angles": [round(float(a), 2) for a in qs[k]],
                    }
                    sc.collisions.append(ev)
                    log.warning("workcell_collision", **ev)
