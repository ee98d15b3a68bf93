"""Contact physics of the workcell in MuJoCo: block, box, mat and the gripper's fingers.

The rules engine (``physics.Physics``) drops a released block straight down and never
moves the box; here MuJoCo decides (docs/simulation-contact.md):

* **world**: the mat is a plane; the box is a free body (a floor and four walls, light
  enough to be pushed) or fixed; the block a free 25 mm cube. The two fingers and the
  wrist are mocap bodies placed from the world's arm (``WorldArm.frames``) and the
  gripper's true opening (55 mm at 100): they push whatever they hit.
* **time**: MuJoCo runs in the arm's sim time (``SimArm.sim_time``, so time scale 50
  works) with a fixed step; one ``step()`` call runs at most ``max_steps_per_call`` steps
  and drops the rest, so a stalled caller never spirals. While nothing moves and the
  hand is far from block and box, stepping is skipped (nothing can change).
* **grasp**: decided when the gripper is told to close, as in the rules engine, from
  where the block sits between the finger pads. Centred: the block is carried
  rigidly with the offset it has. Off centre (its centre farther than
  ``grasp_lever_tol_m`` from the pinch point): it hangs on the pinch point, rotates
  under gravity and falls once turned ``slip_drop_deg``. Held by an edge (pads overlap
  it less than ``grasp_min_overlap_m``): it slips out at once (a miss).
* **release**: the block becomes free and falls; where it comes to rest is the place
  outcome (``box``, ``rim``, ``mat``), and whether it stands upright.

Frames: the scene uses the Unity frame (y up); MuJoCo z is up. ``_P`` swaps y and z;
rotations convert as ``P R P``.

One concern: the MuJoCo world of the workcell (model, stepping, contacts, the read-back to
the scene); split, each part would reach into the same model and data.
"""

from __future__ import annotations

import math
import time
from typing import Any

import mujoco
import numpy as np
from numpy.typing import NDArray

from mecharm.common.logging import get_logger
from mecharm.sim.contact import ContactProfile
from mecharm.sim.physics import GRIP_CONTACT, ArmState, ContactEngineBase
from mecharm.sim.scene import (
    BLOCK_SIZE_M,
    BOX_FLOOR_M,
    BOX_HEIGHT_M,
    BOX_INNER_M,
    BOX_OUTER_M,
    BOX_WALL_M,
    SceneState,
    block_upright,
)
from mecharm.sim.world_arm import WorldArm

__all__ = ["JAW_MAX_M", "MujocoPhysics", "build_mjcf"]

log = get_logger("mecharm.sim.mujoco_physics")
#: a contact must be gone this long (clock seconds) before its next start counts as a new one
_CONTACT_GAP_S = 0.25

JAW_MAX_M = 0.055  # jaw opening at gripper value 100
FINGER_HALF_M = 0.0035  # half thickness of a finger plate
_P = np.array([[1.0, 0, 0], [0, 0, 1.0], [0, 1.0, 0]])  # Unity (x, y, z) <-> MuJoCo (x, z, y)
_KEYS = 8  # arm samples per step() call; the hand moves linearly between them
_MAX_V = 1.5  # m/s, a block dropped from 11 cm; nothing in the workcell moves faster
#: m/s across the mat: the hand sweeps at most ~0.3 m/s (90° in 5.7 s at 0.35 m), and what it
#: pushes cannot go faster; a call that fell behind (a busy machine at a high time scale)
#: moves the hand further per step, and the overlap would otherwise fling the block off the mat
_MAX_V_FLAT = 0.35
_MAT_CLEAR_M = 0.0005  # the fingers' lowest point stays this far above the mat
_MAX_W = 40.0  # rad/s
_REST_V = 0.004  # m/s: below this (and _REST_W) a body is at rest
_REST_W = 0.08  # rad/s
_REST_FOR_S = 0.15  # sim seconds at rest before a drop counts as landed
_BOUNCY_FOR_S = 0.4  # sim seconds after a drop during which the block's contacts may bounce
_YIELD_M = 0.003  # a held block pressed this deep into the box slips out of the jaws
_FAR_BLOCK_M = 0.135  # pads' centre this far from a resting block: no finger or wrist reaches it
_FAR_BOX_M = 0.17  # ... and this far from the box centre
_KIND_NAMES = {1: "box_wall", 2: "box_floor", 3: "block", 4: "box_wall_with_block"}
_WITH_BLOCK = 4
# contact bits: 1 = world/box/block, 2 = fingers<->block, 4 = fingers<->box
_BITS = {"mat": (1, 1), "box": (1, 5), "block": (3, 3), "hand": (6, 0)}


def _restitution_damping(e: float) -> float:
    """MuJoCo's contact damping ratio whose spring-damper bounce returns ``e`` of the speed."""
    if e <= 0.0:
        return 1.0
    ln = math.log(e)
    return -ln / math.sqrt(math.pi**2 + ln * ln)


def build_mjcf(c: ContactProfile) -> str:
    """The workcell in MJCF (MuJoCo frame: z up). Poses are set at run time."""
    zeta = _restitution_damping(c.restitution)
    tc = max(0.008, 4 * c.timestep_s)
    h = BLOCK_SIZE_M / 2
    a = BOX_OUTER_M / 2
    wz = (BOX_HEIGHT_M - BOX_FLOOR_M) / 2
    wc = (BOX_INNER_M + BOX_WALL_M) / 2
    walls = "".join(
        f'<geom name="box_wall{i}" type="box" size="{sx} {sy} {wz}" '
        f'pos="{px} {py} {BOX_FLOOR_M + wz}" {bits_box}/>'
        for i, (sx, sy, px, py) in enumerate(
            [
                (BOX_WALL_M / 2, a, wc, 0),
                (BOX_WALL_M / 2, a, -wc, 0),
                (BOX_INNER_M / 2, BOX_WALL_M / 2, 0, wc),
                (BOX_INNER_M / 2, BOX_WALL_M / 2, 0, -wc),
            ]
        )
        for bits_box in [f'contype="{_BITS["box"][0]}" conaffinity="{_BITS["box"][1]}"']
    )
    box_vol_floor = BOX_OUTER_M**2 * BOX_FLOOR_M
    box_vol_walls = 4 * BOX_OUTER_M * BOX_WALL_M * 2 * wz
    box_density = c.box_mass_kg / (box_vol_floor + box_vol_walls)
    joint = '<freejoint name="box"/>' if c.box_free else ""
    hb = f'contype="{_BITS["hand"][0]}" conaffinity="{_BITS["hand"][1]}"'
    return f"""
<mujoco model="mecharm_workcell">
  <option timestep="{c.timestep_s}" integrator="implicitfast" cone="elliptic"/>
  <default>
    <geom friction="{c.friction} 0.005 0.0001" solref="{tc} 1"
          solimp="0.95 0.99 0.001" condim="4"/>
  </default>
  <worldbody>
    <geom name="mat" type="plane" size="1 1 0.01"
          contype="{_BITS["mat"][0]}" conaffinity="{_BITS["mat"][1]}"/>
    <body name="box" pos="0 0 0">
      {joint}
      <geom name="box_floor" type="box" size="{a} {a} {BOX_FLOOR_M / 2}"
            pos="0 0 {BOX_FLOOR_M / 2}" density="{box_density:.3f}"
            contype="{_BITS["box"][0]}" conaffinity="{_BITS["box"][1]}"/>
      {walls.replace("/>", f' density="{box_density:.3f}"/>')}
    </body>
    <body name="block" pos="0 0 {h}">
      <freejoint name="block"/>
      <geom name="block" type="box" size="{h} {h} {h}" mass="{c.block_mass_kg}" solmix="1000"
            solref="{tc} {zeta:.4f}"
            contype="{_BITS["block"][0]}" conaffinity="{_BITS["block"][1]}"/>
    </body>
    <body name="hand" mocap="true" pos="0 1 1">
      <geom name="wrist" type="capsule" size="0.013" fromto="0 -0.095 -{c.grip_drop_m} 0 -0.04 -{c.grip_drop_m}" {hb}/>
    </body>
    <body name="finger_a" mocap="true" pos="0 1 1">
      <geom name="finger_a" type="box" size="{FINGER_HALF_M} {c.pad_half_m} {c.pad_height_half_m}" {hb}/>
    </body>
    <body name="finger_b" mocap="true" pos="0 1 1">
      <geom name="finger_b" type="box" size="{FINGER_HALF_M} {c.pad_half_m} {c.pad_height_half_m}" {hb}/>
    </body>
  </worldbody>
  <equality>
    <connect name="pinch" body1="block" body2="hand" anchor="0 0 0" active="false"
             solref="0.006 1"/>
  </equality>
</mujoco>
"""


def _quat_of(R: NDArray[np.float64]) -> NDArray[np.float64]:
    q = np.empty(4)
    mujoco.mju_mat2Quat(q, np.ascontiguousarray(R, dtype=np.float64).reshape(9))
    return q


def _mat_of(q: NDArray[np.float64]) -> NDArray[np.float64]:
    R = np.empty(9)
    mujoco.mju_quat2Mat(R, np.asarray(q, dtype=np.float64))
    return R.reshape(3, 3)


def _yaw_near(R_w: NDArray[np.float64], prev: float) -> float:
    """Yaw (deg) of a cube from its Unity-frame rotation, the representative (mod 90) nearest
    ``prev`` so an unmoved block keeps the yaw it was laid out with."""
    k = int(np.argmax(np.abs(R_w[1, :])))  # the axis standing most vertical
    j = (k + 1) % 3
    yaw = math.degrees(math.atan2(R_w[2, j], R_w[0, j]))
    return yaw + 90.0 * round((prev - yaw) / 90.0)


class MujocoPhysics(ContactEngineBase):
    """MuJoCo contacts for the workcell; same interface as ``physics.Physics``."""

    def __init__(
        self,
        scene: SceneState,
        arm: ArmState,
        clock: Any = time.time,
        world: WorldArm | None = None,
        contact: ContactProfile | None = None,
    ) -> None:
        self.scene = scene
        self.arm = arm
        self.world = world or WorldArm()
        self.clock = clock
        self.cfg = contact or ContactProfile(engine="mujoco")
        self.model = mujoco.MjModel.from_xml_string(build_mjcf(self.cfg))
        self.data = mujoco.MjData(self.model)
        m = self.model
        gid = lambda n: mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, n)  # noqa: E731
        bid = lambda n: mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, n)  # noqa: E731
        self._g_block = gid("block")
        self._g_mat = gid("mat")
        self._g_floor = gid("box_floor")
        self._g_walls = {gid(f"box_wall{i}") for i in range(4)}
        self._g_hand = {gid("finger_a"), gid("finger_b"), gid("wrist")}
        self._mocap = {n: int(m.body_mocapid[bid(n)]) for n in ("hand", "finger_a", "finger_b")}
        self._mocap_ids = [self._mocap[n] for n in ("hand", "finger_a", "finger_b")]
        # collision kind of each geom pair (docs/simulation-contact.md, "Collisions")
        box = [*self._g_walls, self._g_floor]
        pk = np.zeros((m.ngeom, m.ngeom), np.int8)
        for h in self._g_hand:
            for w in self._g_walls:
                pk[h, w] = pk[w, h] = 1
            pk[h, self._g_floor] = pk[self._g_floor, h] = 2
            pk[h, self._g_block] = pk[self._g_block, h] = 3
        for x in box:
            pk[self._g_block, x] = pk[x, self._g_block] = _WITH_BLOCK
        self._pair_kind = pk

        jb = m.joint("block")
        self._qb, self._vb = int(jb.qposadr[0]), int(jb.dofadr[0])
        if self.cfg.box_free:
            jx = m.joint("box")
            self._qx: int | None = int(jx.qposadr[0])
            self._vx: int | None = int(jx.dofadr[0])
        else:
            self._qx = self._vx = None
        self._box_body = bid("box")
        self._eq = 0
        self._dt = float(m.opt.timestep)
        self._fk_cache: tuple[bytes, NDArray[np.float64]] | None = None
        # an underdamped contact bounces but also never comes to rest (a limit cycle), so the
        # block's contacts are springy only for a short while after it is dropped
        self._zeta_bouncy = float(m.geom_solref[self._g_block, 1])
        self._bouncy_until = -1.0
        self._forced_miss = False
        self.steps_total = 0
        self._init_state()
        arm.add_listener(self.on_arm_event)

    # ---------------------------------------------------------------- state
    def _sim_now(self) -> float:
        f = getattr(self.arm, "sim_time", None)
        return float(f()) if callable(f) else float(self.clock())

    def _init_state(self) -> None:
        """MuJoCo state from the scene's layout (a new scene)."""
        sc, d, m = self.scene, self.data, self.model
        mujoco.mj_resetData(m, d)
        bx, by, bz = sc.block_xyz
        d.qpos[self._qb : self._qb + 3] = [bx, bz, by]
        d.qpos[self._qb + 3 : self._qb + 7] = _quat_of(_P @ np.reshape(sc.block_rot, (3, 3)) @ _P)
        x, z, yaw = sc.box
        a = math.radians(yaw)
        qbox = np.array([math.cos(a / 2), 0.0, 0.0, math.sin(a / 2)])
        if self._qx is not None:
            d.qpos[self._qx : self._qx + 3] = [x, z, 0.0]
            d.qpos[self._qx + 3 : self._qx + 7] = qbox
        else:
            m.body_pos[self._box_body] = [x, z, 0.0]
            m.body_quat[self._box_body] = qbox
        d.eq_active[self._eq] = 0
        self._set_block_bits(True)
        self._set_bouncy(False)
        self._held = False  # carried rigidly
        self._yield = False
        self._slipping = False  # hanging on the pinch point
        self._hold_off: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None
        self._ghost = False  # finger<->block contacts off until they separate
        self._airborne: dict[str, Any] | None = None  # a dropped block not yet at rest
        self._rest_since: float | None = None
        self._asleep = False
        self._contact: set[str] = set()
        self._contact_seen: dict[str, float] = {}
        self._last_angles: tuple[float, ...] | None = None
        self._last_grip: float | None = None
        #: the arm and jaws of the last step that found nothing could change (``_skippable``)
        self._still: tuple[Any, ...] | None = None
        self._still_tip: NDArray[np.float64] | None = None
        self._t_sim = self._sim_now()
        self._moved_at: tuple[float, ...] = ()
        mujoco.mj_forward(m, d)

    def _set_block_bits(self, fingers_touch: bool) -> None:
        ct, ca = _BITS["block"] if fingers_touch else (1, 1)
        self.model.geom_contype[self._g_block] = ct
        self.model.geom_conaffinity[self._g_block] = ca

    def _set_bouncy(self, on: bool) -> None:
        self.model.geom_solref[self._g_block, 1] = self._zeta_bouncy if on else 1.0
        self._bouncy = on

    def detach(self) -> None:
        self.arm.remove_listener(self.on_arm_event)
        self.arm.block_gripper_at(None)

    def reset(self) -> None:
        """A new scene was laid out: MuJoCo state from it, contacts and jaw blocking forgotten."""
        with self.scene.lock:
            self.arm.block_gripper_at(None)
            self._init_state()
        self.step()

    # ---------------------------------------------------------------- the hand
    def _hand(self, angles: Any, grip: Any) -> tuple[NDArray[np.float64], ...]:
        """(pad centre, R_mj of the hand, finger a, finger b) in MuJoCo coordinates for
        encoder angles ``angles`` (N, 6) and jaw values ``grip`` (N or scalar); arrays of N.
        One forward-kinematics call for all N (it costs about a millisecond per call)."""
        angles = np.atleast_2d(np.asarray(angles, dtype=np.float64))
        still = bool(np.all(angles == angles[0]))
        rows = angles[:1] if still else angles
        key = rows.tobytes()
        if self._fk_cache is not None and self._fk_cache[0] == key:
            fr = self._fk_cache[1]
        else:
            fr = self.world.frames(rows)
            self._fk_cache = (key, fr)
        if still and len(angles) > 1:
            fr = np.repeat(fr, len(angles), axis=0)
        flange, tip = fr[:, 6], fr[:, 7]
        axis = tip - flange
        axis /= np.linalg.norm(axis, axis=1, keepdims=True)
        perp = np.cross(axis, [0.0, 1.0, 0.0])
        bad = np.linalg.norm(perp, axis=1) < 1e-3
        if np.any(bad):
            perp[bad] = np.cross(axis[bad], [1.0, 0.0, 0.0])
        perp /= np.linalg.norm(perp, axis=1, keepdims=True)
        third = np.cross(axis, perp)
        centre = tip + third * self.cfg.grip_drop_m
        # hand axes in the Unity frame (x: jaw, y: tool axis, z: third) -> MuJoCo
        E = np.stack([perp, axis, third], axis=2)  # columns
        R = _P @ E  # P E P^T with the body's own axes unpermuted: a proper rotation (det +1)
        c_mj = centre[:, [0, 2, 1]]
        g = np.clip(np.broadcast_to(np.asarray(grip, dtype=np.float64), len(c_mj)), 0.0, 100.0)
        half = (JAW_MAX_M * g / 100.0 / 2.0 + FINGER_HALF_M)[:, None]
        jaw = R[:, :, 0]
        fa, fb = c_mj + jaw * half, c_mj - jaw * half
        # a finger stops on the mat (the arm's joints and gears give a little) instead of
        # passing through it and trapping the block under the mat's surface: the hand rides
        # on the mat; the arm's own pose (and the truth's tip, and the `mat` collision) stay
        ext = np.abs(R[:, 2, :]) @ np.array(
            [FINGER_HALF_M, self.cfg.pad_half_m, self.cfg.pad_height_half_m]
        )
        lift = np.maximum(0.0, _MAT_CLEAR_M - (np.minimum(fa[:, 2], fb[:, 2]) - ext))
        if np.any(lift > 0):
            up = lift[:, None] * np.array([0.0, 0.0, 1.0])
            c_mj, fa, fb = c_mj + up, fa + up, fb + up
        return c_mj, R, fa, fb

    def _place_hand(
        self, c: NDArray[np.float64], R: NDArray[np.float64], fa: Any, fb: Any, quat: Any = None
    ) -> None:
        d = self.data
        ids = self._mocap_ids
        d.mocap_pos[ids] = (c, fa, fb)
        d.mocap_quat[ids] = _quat_of(R) if quat is None else quat

    # ---------------------------------------------------------------- events from the arm
    def _holding(self) -> bool:
        return self._held or self._slipping

    def _open(self) -> None:
        self._let_go("release")

    def _event(self, kind: str, **data: Any) -> dict[str, Any]:
        ev = {"kind": kind, "ts": self.clock(), **data}
        self.scene.events.append(ev)
        log.info(f"workcell_{kind}", **data)
        return ev

    def _block_pose(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        d = self.data
        return (
            d.qpos[self._qb : self._qb + 3].copy(),
            _mat_of(d.qpos[self._qb + 3 : self._qb + 7]),
        )

    def _try_grasp(self, jaws: float) -> None:
        sc, cfg = self.scene, self.cfg
        angles = self.arm.true_angles()
        c, R, _, _ = (v[0] for v in self._hand(angles, jaws))
        pb, Rb = self._block_pose()
        u, av, w = R.T @ (pb - c)  # block centre in the hand frame: jaw, tool axis, third
        h = BLOCK_SIZE_M / 2
        # the block's half extent along the hand's axes (a cube turned about the vertical)
        ext = np.abs(R.T @ Rb).sum(axis=1) * h
        ov_a = min(av + ext[1], cfg.pad_half_m) - max(av - ext[1], -cfg.pad_half_m)
        ph = cfg.pad_height_half_m
        ov_w = min(w + ext[2], ph) - max(w - ext[2], -ph)
        info = {
            "tip": [round(float(v), 4) for v in self.world.tip(angles)],
            "jaw_mm": round(float(u) * 1000, 1),
            "axis_mm": round(float(av) * 1000, 1),
            "across_mm": round(float(w) * 1000, 1),
            "jaws": round(jaws, 1),
        }
        jaw_open = JAW_MAX_M * jaws / 100.0
        if self._forced_miss:
            self._forced_miss = False
            self._ghost = True  # the jaws close past the block without taking it
            self._set_block_bits(False)
            self._event("miss", reason="forced miss (fault: force_miss_next_grasp)", **info)
            return
        if jaw_open < 2 * ext[0]:
            self._event("miss", reason="jaws were not open wider than the block", **info)
            return
        if abs(u) + ext[0] > jaw_open / 2 + 0.002 or ov_a <= 0 or ov_w <= 0:
            self._event(
                "miss",
                reason=f"block not between the jaws (centre {u * 1000:.1f} mm across the jaws, "
                f"{av * 1000:.1f} mm along the tool, {w * 1000:.1f} mm from the pads' centre)",
                **info,
            )
            return
        if min(ov_a, ov_w) < cfg.grasp_min_overlap_m:
            self._ghost = True
            self._set_block_bits(False)
            self._event(
                "miss",
                reason=f"grasped by an edge (pads overlap the block {min(ov_a, ov_w) * 1000:.1f} mm"
                f" < {cfg.grasp_min_overlap_m * 1000:.0f} mm): it slipped out of the jaws",
                **info,
            )
            return
        # the closing jaws centre the block between them
        pb = pb - R[:, 0] * u
        self.data.qpos[self._qb : self._qb + 3] = pb
        # pinch point: the middle of the pads' overlap with the block
        pa = (max(av - ext[1], -cfg.pad_half_m) + min(av + ext[1], cfg.pad_half_m)) / 2
        pw = (max(w - ext[2], -ph) + min(w + ext[2], ph)) / 2
        pinch = c + R @ np.array([0.0, pa, pw])
        # gravity turns the block about the jaw axis by its centre's horizontal offset from the
        # pinch point (hanging straight below it is stable)
        v = pb - pinch
        v = v - R[:, 0] * float(v @ R[:, 0])
        lever = math.hypot(float(v[0]), float(v[1]))
        sc.grasped = True
        sc.resting_on = "gripper"
        self._set_block_bits(False)
        self.arm.block_gripper_at(GRIP_CONTACT)
        self._airborne = None
        self._asleep = False
        info["lever_mm"] = round(lever * 1000, 1)
        if lever <= cfg.grasp_lever_tol_m:
            self._held = True
            self._hold_off = (R.T @ (pb - c), R.T @ Rb)
            sc.grasp_offset = tuple(  # type: ignore[assignment]
                float(v) for v in (_P @ (pb - c))
            )
            sc.bump()
            self._event("grasp", **info)
            return
        self._slipping = True
        d, m = self.data, self.model
        m.eq_data[self._eq, 0:3] = Rb.T @ (pinch - pb)
        m.eq_data[self._eq, 3:6] = np.array([0.0, pa, pw])
        d.eq_active[self._eq] = 1
        d.qvel[self._vb : self._vb + 6] = 0.0
        self._slip_R0 = Rb
        sc.bump()
        self._event("grasp", **info)
        self._event(
            "slip",
            reason=f"off-centre grasp: block centre {lever * 1000:.1f} mm beside the pinch point "
            f"(tolerance {cfg.grasp_lever_tol_m * 1000:.1f} mm); it rotates in the jaws",
        )

    def _let_go(self, why: str, **extra: Any) -> None:
        """The block leaves the jaws (release or slip) and falls freely."""
        sc, d = self.scene, self.data
        pb, _ = self._block_pose()
        self._held = self._slipping = False
        self._hold_off = None
        d.eq_active[self._eq] = 0
        sc.grasped = False
        sc.resting_on = "air"
        self._ghost = True
        self.arm.block_gripper_at(None)
        self._rest_since = None
        self._asleep = False
        ev = self._event(
            why,
            landed="pending",
            block=[round(float(pb[0]), 4), round(float(pb[1]), 4)],
            height_mm=round((float(pb[2]) - BLOCK_SIZE_M / 2) * 1000, 1),
            **extra,
        )
        self._airborne = ev
        self._set_bouncy(True)
        self._bouncy_until = self._t_sim + _BOUNCY_FOR_S
        sc.bump()

    # ---------------------------------------------------------------- faults
    def knock_block(self, dx_m: float, dz_m: float) -> dict[str, Any]:
        """Fault: the block (not held) is pushed by (dx, dz) metres on the mat, as if knocked.
        Raises ValueError while it is in the jaws."""
        with self.scene.lock:
            if self._held or self._slipping:
                raise ValueError("knock_block: the block is in the gripper; knock it once released")
            d = self.data
            d.qpos[self._qb] += dx_m
            d.qpos[self._qb + 1] += dz_m
            d.qvel[self._vb : self._vb + 6] = 0.0
            self._asleep = False
            mujoco.mj_forward(self.model, d)
            self._sync()
            return self._event("knock", dx_mm=round(dx_m * 1000, 1), dz_mm=round(dz_m * 1000, 1))

    def push_box(self, dx_m: float, dz_m: float) -> dict[str, Any]:
        """Fault: the box slides by (dx, dz) metres on the mat, as when the arm pushes it.
        Raises ValueError while the block lies in it (push it before the place)."""
        with self.scene.lock:
            sc, d = self.scene, self.data
            if sc.resting_on in ("box", "rim") and not (self._held or self._slipping):
                raise ValueError("push_box: the block lies in the box; push it before the place")
            if self._qx is not None and self._vx is not None:
                d.qpos[self._qx] += dx_m
                d.qpos[self._qx + 1] += dz_m
                d.qvel[self._vx : self._vx + 6] = 0.0
            else:
                self.model.body_pos[self._box_body][0] += dx_m
                self.model.body_pos[self._box_body][1] += dz_m
                x, z, yaw = sc.box
                sc.box = (x + dx_m, z + dz_m, yaw)
            self._asleep = False
            mujoco.mj_forward(self.model, d)
            self._sync()
            sc.bump()
            return self._event("push_box", dx_mm=round(dx_m * 1000, 1), dz_mm=round(dz_m * 1000, 1))

    # ---------------------------------------------------------------- stepping
    def step(self) -> None:
        """Advance MuJoCo to the arm's sim time now (at most ``max_steps_per_call`` steps)."""
        angles = tuple(self.arm.true_angles())
        grip = float(self.arm.true_gripper())
        now = self._sim_now()
        with self.scene.lock:
            sc = self.scene
            prev = self._last_angles if self._last_angles is not None else angles
            pgrip = self._last_grip if self._last_grip is not None else grip
            n = int((now - self._t_sim) / self._dt)
            if n <= 0:
                return
            cap = self.cfg.max_steps_per_call
            if n > cap:  # behind: drop the rest instead of catching up
                self._t_sim = now - cap * self._dt
                n = cap
            still = (angles, grip, self.world.sides)
            if self._still == still and self._asleep and not self._slipping:
                # nothing moved since a step that found nothing could change (an idle workcell
                # steps 100 times a second): the same again, without the hand's kinematics
                self._t_sim += n * self._dt
                assert self._still_tip is not None
                self._mat_check(self._still_tip, angles)
                return
            self._still = None
            self._last_angles, self._last_grip = angles, grip
            k = min(_KEYS, n)
            fr = np.linspace(0.0, 1.0, k + 1)  # the start (last call's pose) and k samples
            qs = np.asarray(prev) + np.outer(fr, np.subtract(angles, prev))
            gs = pgrip + fr * (grip - pgrip)
            hc, hR, hfa, hfb = self._hand(qs, gs)
            assert self._fk_cache is not None
            tip = self._fk_cache[1][-1, 7]  # the last sample is the arm now
            sc.tip_xyz = (float(tip[0]), float(tip[1]), float(tip[2]))
            sc.gripper = grip
            if self._skippable(hc):
                self._t_sim += n * self._dt
                if prev == angles and pgrip == grip:
                    self._still, self._still_tip = still, tip.copy()
                if self._held:
                    self._place_hand(hc[-1], hR[-1], hfa[-1], hfb[-1])
                    self._carry(hc[-1], hR[-1], None)
                    self._sync()
                self._mat_check(tip, angles)
                return
            # the hand moves linearly between samples, one position per MuJoCo step, so a
            # finger never jumps into the block (a deep overlap would throw it away)
            span = n / k * self._dt
            hq = [_quat_of(r) for r in hR]  # the orientation changes once per arm sample
            for i in range(n):
                f = (i + 1) / n * k
                j = min(int(f), k - 1)
                w = f - j
                c = hc[j] + (hc[j + 1] - hc[j]) * w
                R = hR[j + 1]
                self._place_hand(
                    c,
                    R,
                    hfa[j] + (hfa[j + 1] - hfa[j]) * w,
                    hfb[j] + (hfb[j + 1] - hfb[j]) * w,
                    hq[j + 1],
                )
                if self._held:
                    self._carry(c, R, (hc[j + 1] - hc[j]) / span)
                if self._bouncy and self._t_sim >= self._bouncy_until:
                    self._set_bouncy(False)
                mujoco.mj_step(self.model, self.data)
                self._t_sim += self._dt
                self._clamp_speed()
                self._contacts(tip, angles)
                if self._yield:  # the box does not give way: the jaws do
                    self._yield = False
                    self._let_go("drop", reason="pressed against the box: slipped out of the jaws")
            self.steps_total += n
            if self._held:
                self._carry(c, R, None)
            self._after_steps()
            self._sync()
            self._mat_check(tip, angles)

    def _clamp_speed(self) -> None:
        """No body faster than a falling block or a swept hand can make it: a deep overlap
        with a kinematic finger would otherwise throw it out of the workcell."""
        d = self.data
        q = d.qvel
        flat = _MAX_V_FLAT * _MAX_V_FLAT
        if (
            float(q @ q) < _MAX_W * _MAX_W
            and float(q[self._vb : self._vb + 2] @ q[self._vb : self._vb + 2]) < flat
            and float(q[self._vb : self._vb + 3] @ q[self._vb : self._vb + 3]) < _MAX_V * _MAX_V
            and (
                self._vx is None
                or float(q[self._vx : self._vx + 3] @ q[self._vx : self._vx + 3]) < flat
            )
        ):
            return  # the usual case, a few dot products
        for v in (self._vb, self._vx):
            if v is None:
                continue
            lin = q[v : v + 3]
            sp = float(np.linalg.norm(lin))
            if sp > _MAX_V:
                lin *= _MAX_V / sp
            across = q[v : v + 2]  # MuJoCo x, y: the mat's plane (z is up)
            sa = float(np.linalg.norm(across))
            if sa > _MAX_V_FLAT:
                across *= _MAX_V_FLAT / sa
            ang = q[v + 3 : v + 6]
            sw = float(np.linalg.norm(ang))
            if sw > _MAX_W:
                ang *= _MAX_W / sw

    def _skippable(self, hc: NDArray[np.float64]) -> bool:
        """Nothing can change: block and box at rest and the hand far from both."""
        if self._slipping or self._airborne is not None or not self._asleep:
            return False
        d = self.data
        pb = d.qpos[self._qb : self._qb + 3]
        px = d.xpos[self._box_body]
        for c in hc:
            if not self._held and np.linalg.norm(c - pb) < _FAR_BLOCK_M:
                return False
            if np.linalg.norm(c - px) < _FAR_BOX_M:
                return False
        return True

    def _carry(self, c: NDArray[np.float64], R: NDArray[np.float64], vel: Any) -> None:
        assert self._hold_off is not None
        off, Rrel = self._hold_off
        d = self.data
        d.qpos[self._qb : self._qb + 3] = c + R @ off
        d.qpos[self._qb + 3 : self._qb + 7] = _quat_of(R @ Rrel)
        d.qvel[self._vb : self._vb + 6] = 0.0
        if vel is not None:
            d.qvel[self._vb : self._vb + 3] = vel

    def _contacts(self, tip: NDArray[np.float64], angles: tuple[float, ...]) -> None:
        """Collision kinds touching now, looked up per contact pair in one numpy step."""
        d = self.data
        kinds: set[str] = set()
        if d.ncon:
            g = d.contact.geom[: d.ncon]
            codes = self._pair_kind[g[:, 0], g[:, 1]]
            if codes.any():
                for code in set(codes[codes > 0].tolist()):
                    if code == _WITH_BLOCK and not self._held:
                        continue
                    kinds.add(_KIND_NAMES[code])
                if self._held:
                    depth = d.contact.dist[: d.ncon][codes == _WITH_BLOCK]
                    if depth.size and float(depth.min()) < -_YIELD_M:
                        self._yield = True
        self._record(kinds, tip, angles, keep={"mat"})

    def _mat_check(self, tip: NDArray[np.float64], angles: tuple[float, ...]) -> None:
        kinds = {"mat"} if float(tip[1]) < -0.002 else set()
        self._record(kinds, tip, angles, only={"mat"})

    def _record(
        self,
        kinds: set[str],
        tip: NDArray[np.float64],
        angles: tuple[float, ...],
        keep: set[str] = frozenset(),  # type: ignore[assignment]
        only: set[str] | None = None,
    ) -> None:
        now = self.clock()
        for kind in kinds:
            self._contact_seen[kind] = now
        for kind in list(self._contact):
            if kind in keep or (only is not None and kind not in only):
                continue
            # a contact ends once it has been gone for a while: pads that chatter on a wall
            # (MuJoCo's contacts come and go step by step) are one contact, not dozens
            if kind not in kinds and now - self._contact_seen.get(kind, now) > _CONTACT_GAP_S:
                self._contact.discard(kind)
        for kind in kinds - self._contact:
            self._contact.add(kind)
            ev = {
                "kind": kind,
                "ts": self.clock(),
                "tip": [round(float(v), 4) for v in tip],
                "angles": [round(float(a), 2) for a in angles],
            }
            self.scene.collisions.append(ev)
            log.warning("workcell_collision", **ev)

    def _after_steps(self) -> None:
        d = self.data
        if self._slipping:
            _, Rb = self._block_pose()
            turn = math.degrees(
                math.acos(max(-1.0, min(1.0, (np.trace(self._slip_R0.T @ Rb) - 1) / 2)))
            )
            if turn >= self.cfg.slip_drop_deg:
                self._let_go("drop", reason=f"slipped out of the jaws after turning {turn:.0f} deg")
        if self._ghost and not (self._held or self._slipping):
            dist = min(
                mujoco.mj_geomDistance(self.model, d, self._g_block, g, 0.01, None)
                for g in self._g_hand
            )
            if dist > 0.0005:
                self._ghost = False
                self._set_block_bits(True)
        vb = np.linalg.norm(d.qvel[self._vb : self._vb + 3])
        wb = np.linalg.norm(d.qvel[self._vb + 3 : self._vb + 6])
        rest = vb < _REST_V and wb < _REST_W
        if self._vx is not None:
            rest = rest and np.linalg.norm(d.qvel[self._vx : self._vx + 3]) < _REST_V
            rest = rest and np.linalg.norm(d.qvel[self._vx + 3 : self._vx + 6]) < _REST_W
        if self._held or self._slipping or not rest:
            self._rest_since = None
            self._asleep = False
            return
        if self._rest_since is None:
            self._rest_since = self._t_sim
        if self._t_sim - self._rest_since >= _REST_FOR_S:
            self._asleep = True
            if self._airborne is not None:
                self._landed()

    def _support(self) -> str:
        """What the free block rests on: mat, box (its floor), rim (a wall, off the mat) or air."""
        d = self.data
        touch: set[int] = set()
        for g1, g2 in d.contact.geom[: d.ncon]:
            a, b = int(g1), int(g2)
            if a == self._g_block:
                touch.add(b)
            elif b == self._g_block:
                touch.add(a)
        if self._g_floor in touch:
            return "box"
        if self._g_mat in touch:
            return "mat"
        if touch & self._g_walls:
            return "rim"
        return "air"

    def _landed(self) -> None:
        sc = self.scene
        where = self._support()
        upright = block_upright(sc.block_rot)
        ev = self._airborne
        self._airborne = None
        if ev is not None:
            ev["landed"] = where
            ev["upright"] = upright
        sc.place_outcome = where
        sc.resting_on = where
        sc.bump()  # the renderer orders the block by what it rests on
        self._event(
            "landed",
            on=where,
            upright=upright,
            block=[round(sc.block_xyz[0], 4), round(sc.block_xyz[2], 4)],
        )

    def _sync(self) -> None:
        """Copy MuJoCo's block and box poses into the scene (Unity frame); new scene version
        when a drawn object moved visibly."""
        sc, d = self.scene, self.data
        pb, Rb = self._block_pose()
        Rw = _P @ Rb @ _P
        sc.block_xyz = [float(pb[0]), float(pb[2]), float(pb[1])]
        sc.block_rot = tuple(float(v) for v in Rw.reshape(9))
        sc.block_yaw_deg = _yaw_near(Rw, sc.block_yaw_deg)
        if self._qx is not None:
            px = d.qpos[self._qx : self._qx + 3]
            Rx = _P @ _mat_of(d.qpos[self._qx + 3 : self._qx + 7]) @ _P
            sc.box = (float(px[0]), float(px[1]), _yaw_near(Rx, sc.box[2]))
        if not (self._held or self._slipping) and self._airborne is None and self._asleep:
            sc.resting_on = self._support() if sc.resting_on == "air" else sc.resting_on
        key = (
            *(round(v, 4) for v in sc.block_xyz),
            round(sc.block_yaw_deg, 1),
            *(round(v, 3) for v in sc.block_rot[3:6]),
            round(sc.box[0], 4),
            round(sc.box[1], 4),
            round(sc.box[2], 1),
        )
        if key != self._moved_at:
            # the box is drawn in the static layer: a box pushed while the block is held (the
            # held block is drawn on top, so its own moves need no new version) must be
            # redrawn too, or the cameras keep showing it where it was
            box_moved = key[-3:] != self._moved_at[-3:]
            self._moved_at = key
            if not self._held or box_moved:
                sc.bump()
