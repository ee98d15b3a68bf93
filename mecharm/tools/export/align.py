"""Resample a recording to the dataset's constant rate: rows, images, state and action.

Row ``k`` of an episode is at ``t_k = t_0 + k / fps`` where ``t_0`` is the first
frame's capture time (frame_log, the truth about timing; never the container's
nominal fps). For every row:

- image: the recorded frame whose capture time is nearest ``t_k`` (ties go to the
  earlier frame, which was already visible at ``t_k``); the same rule picks the top
  camera's frame from its own frame log (same wall clock), docs/lerobot-top-camera.md;
- ``observation.state`` j0..j5: the ``measured`` readings linearly interpolated at
  ``t_k`` when the two neighbours are at most ``max_interp_gap_s`` apart (the arm was
  being polled during a move), otherwise the latest reading held (no polling = the
  arm was at rest); before the first reading the first one is used;
- ``observation.state`` gripper: the value of the last gripper command whose
  settle time (``gripper_settle_s``) has passed, in SDK units;
- ``action`` j0..j5: the angles of the last ``commanded`` row at or before ``t_k``:
  the row is written the moment the send went on the wire and holds the angles
  the daemon says it sent; before the first command the measured pose (hold);
- ``action`` gripper: the value of the last gripper command at or before ``t_k``.

With ``action="measured"`` the action's joints are instead the state's joints of the next
row (the last row: its own): where the arm was 1/fps later. Replayed, that path moves the
arm as the recording did, in steps a streamed loop can send (docs/lerobot.md, "Action").

Before the first gripper event both gripper values take that first event's value
(the trial opens the gripper first); with no gripper event at all, open (100).
See docs/lerobot.md ("How rows are built").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from mecharm.common.framegaps import MAX_FRAME_OFFSET_S, nearest_frames, row_offsets
from mecharm.common.gripper import GRIPPER_OPEN_VALUE, GRIPPER_SETTLE_S
from mecharm.tools.export.recording import Recording, RecordingError

__all__ = ["TOP_EDGE_TRIM_S", "AlignedEpisode", "align_recording"]

#: at most this much of a recording's start (or end) is left out where the top camera has
#: no frame yet (or any more); more than that is a top recording that does not cover the
#: trial, refused (docs/lerobot-top-camera.md, "Where the rows begin")
TOP_EDGE_TRIM_S = 2.0


@dataclass
class AlignedEpisode:
    timestamps: NDArray[np.float64]  # k / fps
    row_times: NDArray[np.float64]  # wall clock of each row
    source_frames: NDArray[np.int64]  # frame index in episode.mp4 for each row
    frame_offsets: NDArray[np.float64]  # |capture_ts - row time|, seconds
    state: NDArray[np.float32]  # (N, 7)
    action: NDArray[np.float32]  # (N, 7)
    #: frame index in top_camera.mkv for each row, and its distance (None: side-only dataset)
    top_frames: NDArray[np.int64] | None = None
    top_offsets: NDArray[np.float64] | None = None

    def __len__(self) -> int:
        return len(self.timestamps)


def _interp_hold(
    ts: NDArray[np.float64], values: NDArray[np.float64], t: NDArray[np.float64], max_gap: float
) -> NDArray[np.float64]:
    """Linear interpolation across gaps <= max_gap, zero-order hold across longer ones."""
    j = np.searchsorted(ts, t, side="right") - 1
    lo = np.clip(j, 0, len(ts) - 1)
    hi = np.clip(j + 1, 0, len(ts) - 1)
    t_lo, t_hi = ts[lo], ts[hi]
    span = t_hi - t_lo
    frac = np.where(
        (span > 0) & (span <= max_gap) & (j >= 0), (t - t_lo) / np.where(span > 0, span, 1.0), 0.0
    )
    frac = np.clip(frac, 0.0, 1.0)[:, None]
    out = values[lo] + frac * (values[hi] - values[lo])
    return out


def _step(
    ts: NDArray[np.float64], values: NDArray[np.float64], t: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """Last value at or before each t, and a mask of the times before the first one."""
    j = np.searchsorted(ts, t, side="right") - 1
    return values[np.clip(j, 0, len(ts) - 1)], j < 0


def align_recording(
    rec: Recording,
    fps: int,
    *,
    max_interp_gap_s: float = 0.25,
    gripper_settle_s: float = GRIPPER_SETTLE_S,
    max_frame_offset_s: float = MAX_FRAME_OFFSET_S,
    top_ts: NDArray[np.float64] | None = None,
    action: str = "command",
) -> AlignedEpisode:
    """Build the episode's rows; raise RecordingError when a row has no frame near it.

    ``top_ts``: the top camera's capture times; each row also gets the top frame
    nearest it, under the same ``max_frame_offset_s`` limit."""
    # the rows and their frames by the one rule the recorder's status uses too
    # (mecharm/common/framegaps.py)
    timestamps, frames, offsets = row_offsets(rec.frame_ts, fps)
    n = len(timestamps)
    row_times = float(rec.frame_ts[0]) + timestamps
    worst = int(np.argmax(offsets))
    if offsets[worst] > max_frame_offset_s:
        raise RecordingError(
            f"row {worst} (t={timestamps[worst]:.2f} s) is {offsets[worst]:.3f} s from the nearest frame "
            f"(limit {max_frame_offset_s} s): the camera stalled"
        )
    top_frames = top_offsets = None
    if top_ts is not None and len(top_ts):
        # the top camera's recording starts a moment after the side camera's first frame (its
        # first frame comes ~1 s after it is opened on the rig): the rows begin where both
        # cameras are, and end where both still are, by up to TOP_EDGE_TRIM_S at each end
        cover = (row_times >= top_ts[0] - max_frame_offset_s) & (
            row_times <= top_ts[-1] + max_frame_offset_s
        )
        if cover.any():
            k0 = int(np.argmax(cover))
            k1 = n - int(np.argmax(cover[::-1]))
            if (k0 or k1 < n) and max(k0, n - k1) / fps <= TOP_EDGE_TRIM_S:
                frames, offsets, row_times = frames[k0:k1], offsets[k0:k1], row_times[k0:k1]
                n = k1 - k0
                timestamps = np.arange(n, dtype=np.int64) / fps
        top_frames = nearest_frames(top_ts, row_times)
        top_offsets = np.abs(top_ts[top_frames] - row_times)
        worst = int(np.argmax(top_offsets))
        if top_offsets[worst] > max_frame_offset_s:
            raise RecordingError(
                f"row {worst} (t={timestamps[worst]:.2f} s) is {top_offsets[worst]:.3f} s from the "
                f"nearest top camera frame (limit {max_frame_offset_s} s): the top camera stalled "
                "or its recording does not cover the trial"
            )
    joints = _interp_hold(rec.measured_ts, rec.measured, row_times, max_interp_gap_s)
    if action == "measured":
        target = np.vstack([joints[1:], joints[-1:]])
    elif len(rec.commanded_ts):
        target, before = _step(rec.commanded_ts, rec.commanded, row_times)
        target = np.where(before[:, None], joints, target)
    else:
        target = joints.copy()
    if len(rec.gripper_ts):
        g = rec.gripper[:, None]
        grip_cmd, _ = _step(rec.gripper_ts, g, row_times)
        grip_obs, _ = _step(rec.gripper_ts + gripper_settle_s, g, row_times)
    else:
        grip_cmd = grip_obs = np.full((n, 1), float(GRIPPER_OPEN_VALUE))
    state = np.hstack([joints, grip_obs]).astype(np.float32)
    actions = np.hstack([target, grip_cmd]).astype(np.float32)
    if not (
        np.isfinite(state).all() and np.isfinite(actions).all()
    ):  # pragma: no cover - inputs are finite
        raise RecordingError("state/action contain non-finite values")
    return AlignedEpisode(
        timestamps, row_times, frames, offsets, state, actions, top_frames, top_offsets
    )
