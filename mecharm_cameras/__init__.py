"""Camera sources behind one interface (``CameraSource``); ``open_camera(spec)`` picks one.

Usable outside the recorder: the runtime reads its top camera through it too.
"""

from __future__ import annotations

from mecharm_cameras.base import (
    CameraError,
    CameraNotOpenError,
    CameraOpenError,
    CameraSource,
    Frame,
)
from mecharm_cameras.factory import make_camera, open_camera
from mecharm_cameras.mjpeg_http import MjpegHttpCamera
from mecharm_cameras.names import CameraNameError, resolve_camera_name
from mecharm_cameras.opencv_source import OpenCVCamera, VideoFileCamera
from mecharm_cameras.synthetic import SyntheticCamera, SyntheticFaults, synthetic_faults

__all__ = [
    "CameraError",
    "CameraNameError",
    "CameraNotOpenError",
    "CameraOpenError",
    "CameraSource",
    "Frame",
    "MjpegHttpCamera",
    "OpenCVCamera",
    "SyntheticCamera",
    "SyntheticFaults",
    "VideoFileCamera",
    "make_camera",
    "open_camera",
    "resolve_camera_name",
    "synthetic_faults",
]
