"""Camera sources behind one interface (``CameraSource``); ``open_camera(spec)`` picks one.

Usable outside the recorder: the runtime reads its top camera through it too.
How old a frame may be is decided in one place: ``freshness`` (``is_fresh``, ``FrameBuffer``).
"""

from __future__ import annotations

from mecharm.cameras.base import (
    CameraError,
    CameraNotOpenError,
    CameraOpenError,
    CameraSource,
    Frame,
)
from mecharm.cameras.factory import is_synthetic, make_camera, open_camera
from mecharm.cameras.freshness import (
    AgedFrame,
    FrameBuffer,
    FreezeWatch,
    NoFrameError,
    StaleFrameError,
    frame_age_s,
    frame_hash,
    is_fresh,
)
from mecharm.cameras.mjpeg_http import MjpegHttpCamera
from mecharm.cameras.names import CameraNameError, resolve_camera_name
from mecharm.cameras.opencv_source import OpenCVCamera, VideoFileCamera
from mecharm.cameras.synthetic import SyntheticCamera, SyntheticFaults, synthetic_faults

__all__ = [
    "AgedFrame",
    "CameraError",
    "CameraNameError",
    "CameraNotOpenError",
    "CameraOpenError",
    "CameraSource",
    "Frame",
    "FrameBuffer",
    "FreezeWatch",
    "MjpegHttpCamera",
    "NoFrameError",
    "OpenCVCamera",
    "StaleFrameError",
    "SyntheticCamera",
    "SyntheticFaults",
    "VideoFileCamera",
    "frame_age_s",
    "frame_hash",
    "is_fresh",
    "is_synthetic",
    "make_camera",
    "open_camera",
    "resolve_camera_name",
    "synthetic_faults",
]
