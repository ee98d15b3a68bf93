"""JPEG snapshots for frame_request: encode the newest frame and write it without clobbering."""

from __future__ import annotations

import time
from pathlib import Path

import cv2
import numpy as np

from mecharm.common.fsutil import validate_name

__all__ = ["SnapshotEncodeError", "save_jpeg", "snapshot_name"]


class SnapshotEncodeError(RuntimeError):
    """cv2.imencode refused the image."""


def snapshot_name(tag: str, capture_ts: float, n: int = 0) -> str:
    """``{tag}_{YYYYmmdd_HHMMSS_mmm}.jpg`` from the frame's capture time (``_n`` on a clash)."""
    stamp = time.strftime("%Y%m%d_%H%M%S", time.localtime(capture_ts))
    ms = int((capture_ts % 1) * 1000)
    suffix = f"_{n}" if n else ""
    # tag is a validated single component (<= NAME_MAX chars); the rest is digits: safe, < 255
    return f"{validate_name(tag, 'tag')}_{stamp}_{ms:03d}{suffix}.jpg"


def save_jpeg(
    image: np.ndarray,
    folder: Path,
    tag: str,
    capture_ts: float,
    quality: int = 90,
    jpeg: bytes | None = None,
) -> Path:
    """Write the image as a new file in ``folder``; never overwrites.

    ``jpeg``: the source's own JPEG of this frame (MJPEG cameras), written as is —
    no re-encode, no generation loss, and the request costs no CPU to speak of.
    Raises OSError/SnapshotEncodeError.
    """
    if jpeg is not None:
        data = jpeg
    else:
        ok, buf = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
        if not ok:
            raise SnapshotEncodeError("cv2.imencode failed")
        data = buf.tobytes()
    for n in range(100):
        path = folder / snapshot_name(tag, capture_ts, n)
        try:
            with open(path, "xb") as fh:
                fh.write(data)
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"100 snapshots named {tag} at the same instant in {folder}")
