"""The one rule for whether a camera recording is good enough: every dataset row has a
frame near it (docs/recorder.md, "When a recording is not ok").

The exporter makes a row every 1/fps seconds from the first frame to the last and shows
the frame nearest each row; a row farther than ``MAX_FRAME_OFFSET_S`` from every frame
refuses the whole trial (the camera stalled). The recorder applies the same rule to the
frames it wrote, at the exporter's defaults, so a recording the exporter would refuse is
never called ``ok``: its status is ``stalled`` and its reason says where and how long.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

__all__ = ["MAX_FRAME_OFFSET_S", "ROW_FPS", "nearest_frames", "row_offsets", "stall_problem"]

#: the exporter's default dataset rate (rows a second)
ROW_FPS = 10
#: the exporter's default limit: a row this far (s) from every frame refuses the trial
MAX_FRAME_OFFSET_S = 0.5


def nearest_frames(frame_ts: NDArray[np.float64], t: NDArray[np.float64]) -> NDArray[np.int64]:
    """Index of the frame nearest each time in ``t`` (ties to the earlier frame)."""
    right = np.clip(np.searchsorted(frame_ts, t, side="left"), 1, len(frame_ts) - 1)
    left = right - 1
    take_left = (t - frame_ts[left]) <= (frame_ts[right] - t)
    return np.where(take_left, left, right).astype(np.int64)


def row_offsets(
    frame_ts: NDArray[np.float64], fps: float
) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.float64]]:
    """The rows of a recording at ``fps`` (seconds from the first frame), the frame each
    shows and its distance from the row."""
    t0 = float(frame_ts[0])
    n = int(np.floor((float(frame_ts[-1]) - t0) * fps + 1e-9)) + 1
    timestamps = np.arange(n, dtype=np.int64) / fps
    rows = t0 + timestamps
    frames = nearest_frames(frame_ts, rows)
    return timestamps, frames, np.abs(frame_ts[frames] - rows)


def stall_problem(
    frame_ts: Sequence[float] | NDArray[np.float64],
    fps: float = ROW_FPS,
    max_offset_s: float = MAX_FRAME_OFFSET_S,
) -> str | None:
    """Why the exporter would refuse these frames (None: it would take them): the worst
    row's distance from its frame, the longest gap between frames and the frame rate."""
    ts = np.asarray(frame_ts, dtype=np.float64)
    if len(ts) < 2:
        return None  # nothing to space out; the exporter has its own word on empty videos
    timestamps, _frames, offsets = row_offsets(ts, fps)
    worst = int(np.argmax(offsets))
    if offsets[worst] <= max_offset_s:
        return None
    gaps = np.diff(ts)
    g = int(np.argmax(gaps))
    span = float(ts[-1] - ts[0])
    rate = (len(ts) - 1) / span if span > 0 else 0.0
    return (
        f"camera stalled: {float(gaps[g]):.2f} s without a frame at {float(ts[g] - ts[0]):.1f} s "
        f"(a {fps:g} Hz row {offsets[worst]:.2f} s from the nearest frame at "
        f"t={timestamps[worst]:.1f} s; limit {max_offset_s:g} s); {rate:.1f} fps over the trial"
    )
