"""The side camera's video in a Rerun recording (docs/viewing.md): as the recorder's H.264
file with one frame reference per frame_log row (frame-accurate, small, needs an ``ffmpeg``
executable in the desktop viewer), or as JPEG images decoded here with PyAV (what the
desktop viewer shows without ffmpeg, "Without ffmpeg")."""

from __future__ import annotations

import math
from typing import Any

import rerun as rr

from mecharm.tools.view.trialfiles import TrialFiles

__all__ = [
    "SIDE_IMAGE_FPS",
    "SIDE_IMAGE_QUALITY",
    "SIDE_IMAGE_WIDTH",
    "capture_times",
    "is_time",
    "log_side_asset",
    "log_side_images",
]

#: the side video as images: this many a second, at most this wide, this JPEG quality
SIDE_IMAGE_FPS = 10.0
SIDE_IMAGE_WIDTH = 640
SIDE_IMAGE_QUALITY = 80
#: the latest time a trace line may carry: wall-clock seconds (Rerun holds ns in an int64,
#: so a time in ms or 1e30 cannot be placed; 4e9 s is the year 2096)
MAX_TS = 4.0e9


def is_time(v: Any) -> bool:
    """A wall-clock time in seconds Rerun can place on the timeline."""
    return (
        isinstance(v, int | float)
        and not isinstance(v, bool)
        and math.isfinite(v)
        and 0.0 <= v <= MAX_TS
    )


def capture_times(tf: TrialFiles, n: int | None = None) -> list[float]:
    """The ``capture_ts`` of the first ``n`` frame_log rows (NaN where a row has none)."""
    out = []
    for row in tf.frame_log[:n]:
        try:
            out.append(float(row["capture_ts"]))
        except (KeyError, TypeError, ValueError):
            out.append(float("nan"))
    return out


def log_side_asset(
    rec: rr.RecordingStream, entity: str, timeline: str, tf: TrialFiles
) -> tuple[int, str]:
    """The mp4 as one asset plus a frame reference per frame_log row at its ``capture_ts``:
    row i shows the container's frame i. (frames shown, a note when the counts differ)."""
    assert tf.video is not None
    asset = rr.AssetVideo(path=tf.video)
    pts = asset.read_frame_timestamps_nanos()
    rec.log(entity, asset, static=True)
    n = min(len(pts), len(tf.frame_log))
    note = ""
    if n != len(tf.frame_log) or n != len(pts):
        note = f"side video: {len(pts)} frames in the mp4, {len(tf.frame_log)} rows in the frame log; the first {n} shown"
    times = capture_times(tf, n)
    keep = [i for i in range(n) if is_time(times[i])]
    rec.send_columns(
        entity,
        indexes=[rr.TimeColumn(timeline, timestamp=[times[i] for i in keep])],
        columns=rr.VideoFrameReference.columns_nanos([int(pts[i]) for i in keep]),
    )
    return len(keep), note


def log_side_images(rec: rr.RecordingStream, entity: str, timeline: str, tf: TrialFiles) -> int:
    """The mp4 decoded with PyAV, a JPEG image every 1/``SIDE_IMAGE_FPS`` s (on a grid of
    capture times), at most ``SIDE_IMAGE_WIDTH`` wide; the number logged."""
    import av
    import cv2

    assert tf.video is not None
    times = capture_times(tf)
    step = 1.0 / SIDE_IMAGE_FPS
    due = -math.inf  # the next image's time on the grid
    n = 0
    with av.open(str(tf.video)) as container:
        for i, frame in enumerate(container.decode(video=0)):
            if i >= len(times):
                break
            t = times[i]
            if not is_time(t) or t < due:
                continue
            due = due + step if t - due < step else t + step
            w = min(frame.width, SIDE_IMAGE_WIDTH)
            h = round(frame.height * w / frame.width / 2) * 2
            bgr = frame.reformat(width=w, height=h, format="bgr24").to_ndarray()
            ok, jpg = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, SIDE_IMAGE_QUALITY])
            if not ok:
                continue
            rec.set_time(timeline, timestamp=t)
            rec.log(entity, rr.EncodedImage(contents=jpg.tobytes(), media_type="image/jpeg"))
            n += 1
    return n
