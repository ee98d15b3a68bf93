"""Forward kinematics of the mechArm 270 Pi (official URDF chain), vectorized.

The chain is the official ``mecharm_270_pi.urdf``: every joint rotates about its
local z axis after a fixed origin transform (xyz metres, rpy radians). The tool
tip lies ``TOOL_OFFSET_M`` beyond the flange along the flange's z axis. Results
are expressed in the rig's Unity frame (docs/kinematics.md): x = -y_urdf, y = z_urdf - 0.010,
z = x_urdf. With a 100 mm tool the rig's two calibration rows come out
within 2.6 mm and 3.2 mm.

The chain is evaluated element-wise on flat arrays (one array per matrix entry)
instead of with stacks of 4x4 matrix products: the table builder evaluates a
million poses and small-matrix ``matmul`` is dominated by per-matrix overhead.
Entries of the fixed origin rotations that are exactly 0 or ±1 are folded away.
A single pose (the simulator draws and steps one at a time, the runtime checks one)
takes the same products and sums on Python floats instead: five times faster than
on one-element arrays, and the same values.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "JOINT_MAX",
    "JOINT_MIN",
    "JOINT_ORIGINS",
    "ORIGIN_DROP_M",
    "TOOL_OFFSET_M",
    "fk_frames",
    "fk_tip",
    "fk_wrist_tip",
    "urdf_to_unity",
]

#: SDK joint limits (pymycobot robot_info, MechArm270), degrees.
JOINT_MIN: tuple[float, ...] = (-160.0, -75.0, -175.0, -155.0, -115.0, -180.0)
JOINT_MAX: tuple[float, ...] = (160.0, 120.0, 65.0, 155.0, 115.0, 180.0)

#: (xyz, rpy) of each joint origin relative to the previous joint frame.
JOINT_ORIGINS: tuple[tuple[tuple[float, float, float], tuple[float, float, float]], ...] = (
    ((0.0, 0.0, 0.100), (0.0, 0.0, 0.0)),
    ((0.0, 0.0, 0.038), (-np.pi / 2, 0.0, 0.0)),
    ((0.0, -0.100, 0.0), (0.0, 0.0, 0.0)),
    ((0.108, -0.005, -0.001), (0.0, np.pi / 2, 0.0)),
    ((-0.001, 0.0, 0.0), (0.0, -np.pi / 2, 0.0)),
    ((0.060, 0.0, 0.0), (0.0, np.pi / 2, 0.0)),
)

TOOL_OFFSET_M = 0.100
ORIGIN_DROP_M = 0.010


def _rpy_matrix(r: float, p: float, y: float) -> NDArray[np.float64]:
    cr, sr, cp, sp, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
    rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    m = rz @ ry @ rx
    m[np.abs(m) < 1e-12] = 0.0  # cos(pi/2) is 6e-17, not 0: fold it
    return m


_ORIGIN_R = [_rpy_matrix(*rpy) for _xyz, rpy in JOINT_ORIGINS]
_ORIGIN_P = [tuple(float(v) for v in xyz) for xyz, _rpy in JOINT_ORIGINS]
_ORIGIN_RF = [tuple(tuple(float(v) for v in row) for row in m) for m in _ORIGIN_R]


def urdf_to_unity(p: NDArray[np.float64]) -> NDArray[np.float64]:
    """Map URDF base-frame points (..., 3) to the Unity frame (..., 3)."""
    out = np.empty_like(p)
    out[..., 0] = -p[..., 1]
    out[..., 1] = p[..., 2] - ORIGIN_DROP_M
    out[..., 2] = p[..., 0]
    return out


def _lin(terms: list[tuple[float, Any]]) -> Any:
    """sum(coef * value) skipping zero coefficients; values are arrays or floats."""
    acc: Any = 0.0
    for coef, val in terms:
        if coef == 0.0 or (isinstance(val, float) and val == 0.0):
            continue
        term = val if coef == 1.0 else (-val if coef == -1.0 else coef * val)
        acc = term if (isinstance(acc, float) and acc == 0.0) else acc + term
    return acc


def _chain(q: NDArray[np.float64], frames: bool) -> list[list[Any]]:
    """Walk the chain on flat arrays; return the joint-frame origins (URDF) and the tip.

    ``q`` has shape (6, n) in radians. Returns a list of [x, y, z] (arrays or floats)
    for the frames 1..6 when ``frames`` is set, always followed by the tip.
    """
    c, s = np.cos(q), np.sin(q)
    if q.shape[1] == 1:
        return _chain_one(c.ravel().tolist(), s.ravel().tolist(), frames)
    rot: list[list[Any]] = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    pos: list[Any] = [0.0, 0.0, 0.0]
    out: list[list[Any]] = []
    for i in range(6):
        o = _ORIGIN_P[i]
        pos = [_lin([(1.0, pos[k])] + [(o[j], rot[k][j]) for j in range(3)]) for k in range(3)]
        ro = _ORIGIN_R[i]
        a = [[_lin([(ro[j][m], rot[k][j]) for j in range(3)]) for m in range(3)] for k in range(3)]
        if frames:
            out.append(list(pos))
        if i == 5 and not frames:
            break  # the tip only needs the flange z axis, which q5 does not change
        ci, si = c[i], s[i]
        rot = [
            [a[k][0] * ci + a[k][1] * si, a[k][1] * ci - a[k][0] * si, a[k][2]] for k in range(3)
        ]
    z_axis = [a[k][2] for k in range(3)]
    out.append(z_axis)  # placeholder replaced by the caller with pos + tool * z
    out.append(list(pos))
    return out


def _chain_one(c: list[float], s: list[float], frames: bool) -> list[list[Any]]:
    """``_chain`` for one pose on Python floats (``c``, ``s``: the joints' cosines and sines).

    The same products summed in the same order: where ``_chain`` skips a term its
    coefficient is an exact 0, and adding an exact zero leaves a sum as it was, so both
    give equal values (tests/common/test_kinematics.py holds them to it; a coordinate
    that is exactly zero may carry the other sign, which no comparison sees).
    """
    r00, r01, r02, r10, r11, r12, r20, r21, r22 = 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0
    px = py = pz = 0.0
    b02 = b12 = b22 = 0.0
    out: list[list[Any]] = []
    for i in range(6):
        ox, oy, oz = _ORIGIN_P[i]
        px = px + ox * r00 + oy * r01 + oz * r02
        py = py + ox * r10 + oy * r11 + oz * r12
        pz = pz + ox * r20 + oy * r21 + oz * r22
        (a00, a01, a02), (a10, a11, a12), (a20, a21, a22) = _ORIGIN_RF[i]
        b00 = r00 * a00 + r01 * a10 + r02 * a20
        b01 = r00 * a01 + r01 * a11 + r02 * a21
        b02 = r00 * a02 + r01 * a12 + r02 * a22
        b10 = r10 * a00 + r11 * a10 + r12 * a20
        b11 = r10 * a01 + r11 * a11 + r12 * a21
        b12 = r10 * a02 + r11 * a12 + r12 * a22
        b20 = r20 * a00 + r21 * a10 + r22 * a20
        b21 = r20 * a01 + r21 * a11 + r22 * a21
        b22 = r20 * a02 + r21 * a12 + r22 * a22
        if frames:
            out.append([px, py, pz])
        if i == 5 and not frames:
            break  # as in _chain: the tip needs only the flange z axis
        ci, si = c[i], s[i]
        r00, r01, r02 = b00 * ci + b01 * si, b01 * ci - b00 * si, b02
        r10, r11, r12 = b10 * ci + b11 * si, b11 * ci - b10 * si, b12
        r20, r21, r22 = b20 * ci + b21 * si, b21 * ci - b20 * si, b22
    out.append([b02, b12, b22])
    out.append([px, py, pz])
    return out


def _as_q(angles_deg: ArrayLike) -> tuple[NDArray[np.float64], tuple[int, ...]]:
    q = np.radians(np.asarray(angles_deg, dtype=np.float64))
    if q.shape[-1:] != (6,):
        raise ValueError(f"angles_deg must have 6 values in its last axis, got shape {q.shape}")
    lead = q.shape[:-1]
    return np.ascontiguousarray(q.reshape(-1, 6).T), lead


def _stack(xyz: list[Any], n: int) -> NDArray[np.float64]:
    """URDF [x, y, z] (arrays or floats) -> Unity (n, 3)."""
    out = np.empty((n, 3))
    out[:, 0] = -np.broadcast_to(xyz[1], (n,))
    out[:, 1] = np.broadcast_to(xyz[2], (n,)) - ORIGIN_DROP_M
    out[:, 2] = np.broadcast_to(xyz[0], (n,))
    return out


def _unity_one(xyz: list[float]) -> tuple[float, float, float]:
    """``_stack`` for one point of floats."""
    x, y, z = xyz
    return (-y, z - ORIGIN_DROP_M, x)


def fk_frames(angles_deg: ArrayLike, tool_m: float = TOOL_OFFSET_M) -> NDArray[np.float64]:
    """Positions of the base, the six joint frames and the tool tip, Unity frame.

    ``angles_deg`` has shape (..., 6); the result has shape (..., 8, 3): index 0 is
    the base origin, 1..6 the joint frames (6 = flange), 7 the tool tip. Used by the
    simulator to draw links and by ``fk_tip``.
    """
    q, lead = _as_q(angles_deg)
    n = q.shape[1]
    res = _chain(q, frames=True)
    frames6, z_axis, flange = res[:6], res[6], res[7]
    if n == 1:  # floats: _stack's arithmetic without its per-call array overhead
        tip = [flange[k] + z_axis[k] * tool_m for k in range(3)]
        rows = [[0.0, 0.0, 0.0], *frames6, tip]
        return np.array([_unity_one(r) for r in rows]).reshape(*lead, 8, 3)
    pts = np.empty((n, 8, 3))
    pts[:, 0, :] = _stack([0.0, 0.0, 0.0], n)
    for i in range(6):
        pts[:, i + 1, :] = _stack(frames6[i], n)
    pts[:, 7, :] = _stack([flange[k] + z_axis[k] * tool_m for k in range(3)], n)
    return pts.reshape(*lead, 8, 3)


def fk_tip(angles_deg: ArrayLike, tool_m: float = TOOL_OFFSET_M) -> NDArray[np.float64]:
    """Tool-tip position (ee_x, ee_y, ee_z) in metres, Unity frame; shape (..., 3)."""
    q, lead = _as_q(angles_deg)
    n = q.shape[1]
    res = _chain(q, frames=False)
    z_axis, flange = res[-2], res[-1]
    tip = [flange[k] + z_axis[k] * tool_m for k in range(3)]
    if n == 1:
        return np.array(_unity_one(tip)).reshape(*lead, 3)
    return _stack(tip, n).reshape(*lead, 3)


def fk_wrist_tip(angles_deg: ArrayLike, tool_m: float = TOOL_OFFSET_M) -> NDArray[np.float64]:
    """Flange (wrist) and tool-tip positions in one pass, Unity frame; shape (..., 2, 3).

    Index 0 is the flange (the wrist end of the chain, where the tool is mounted), 1 the
    tip (equal to ``fk_tip``). The path check (mecharm/runtime/pathcheck.py) tests both
    points of every sample against the mat and the box, so it needs them at ``fk_tip``'s cost.
    """
    q, lead = _as_q(angles_deg)
    n = q.shape[1]
    res = _chain(q, frames=False)
    z_axis, flange = res[-2], res[-1]
    tip = [flange[k] + z_axis[k] * tool_m for k in range(3)]
    if n == 1:
        return np.array([_unity_one(flange), _unity_one(tip)]).reshape(*lead, 2, 3)
    out = np.empty((n, 2, 3))
    out[:, 0, :] = _stack(flange, n)
    out[:, 1, :] = _stack(tip, n)
    return out.reshape(*lead, 2, 3)
