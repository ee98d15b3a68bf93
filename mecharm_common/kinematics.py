"""Forward kinematics of the mechArm 270 Pi (URDF chain of SPEC §3), vectorized.

The chain is the official ``mecharm_270_pi.urdf``: every joint rotates about its
local z axis after a fixed origin transform (xyz metres, rpy radians). The tool
tip lies ``TOOL_OFFSET_M`` beyond the flange along the flange's z axis. Results
are expressed in the rig's Unity frame (SPEC §4): x = -y_urdf, y = z_urdf - 0.010,
z = x_urdf. With a 100 mm tool the two calibration rows of SPEC §3 come out
within 2.6 mm and 3.2 mm.
"""

from __future__ import annotations

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
    return rz @ ry @ rx


_ORIGIN_T = []
for _xyz, _rpy in JOINT_ORIGINS:
    _t = np.eye(4)
    _t[:3, :3] = _rpy_matrix(*_rpy)
    _t[:3, 3] = _xyz
    _ORIGIN_T.append(_t)
_ORIGINS = np.stack(_ORIGIN_T)  # (6, 4, 4)


def urdf_to_unity(p: NDArray[np.float64]) -> NDArray[np.float64]:
    """Map URDF base-frame points (..., 3) to the Unity frame (..., 3)."""
    out = np.empty_like(p)
    out[..., 0] = -p[..., 1]
    out[..., 1] = p[..., 2] - ORIGIN_DROP_M
    out[..., 2] = p[..., 0]
    return out


def fk_frames(angles_deg: ArrayLike, tool_m: float = TOOL_OFFSET_M) -> NDArray[np.float64]:
    """Positions of the base, the six joint frames and the tool tip, Unity frame.

    ``angles_deg`` has shape (..., 6); the result has shape (..., 8, 3): index 0 is
    the base origin, 1..6 the joint frames (6 = flange), 7 the tool tip. Used by the
    simulator to draw links and by ``fk_tip``.
    """
    q = np.radians(np.asarray(angles_deg, dtype=np.float64))
    if q.shape[-1] != 6:
        raise ValueError(f"angles_deg must have 6 values in its last axis, got shape {q.shape}")
    lead = q.shape[:-1]
    t = np.broadcast_to(np.eye(4), (*lead, 4, 4)).copy()
    pts = np.empty((*lead, 8, 3))
    pts[..., 0, :] = 0.0
    c, s = np.cos(q), np.sin(q)
    for i in range(6):
        rz = np.zeros((*lead, 4, 4))
        rz[..., 0, 0] = c[..., i]
        rz[..., 0, 1] = -s[..., i]
        rz[..., 1, 0] = s[..., i]
        rz[..., 1, 1] = c[..., i]
        rz[..., 2, 2] = 1.0
        rz[..., 3, 3] = 1.0
        t = t @ _ORIGINS[i] @ rz
        pts[..., i + 1, :] = t[..., :3, 3]
    pts[..., 7, :] = t[..., :3, 3] + t[..., :3, 2] * tool_m
    return urdf_to_unity(pts)


def fk_tip(angles_deg: ArrayLike, tool_m: float = TOOL_OFFSET_M) -> NDArray[np.float64]:
    """Tool-tip position (ee_x, ee_y, ee_z) in metres, Unity frame; shape (..., 3)."""
    return fk_frames(angles_deg, tool_m)[..., 7, :]
