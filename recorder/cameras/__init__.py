"""Camera sources behind one interface (``CameraSource``); ``open_camera(spec)`` picks one.

Usable outside the recorder: the runtime reads its top camera through it too.
"""

from __future__ import annotations

from recorder.cameras.base import (
    CameraError,
    CameraNotOpenError,
    CameraOpenError,
    CameraSource,
    Frame,
)
from recorder.cameras.factory import make_camera, open_camera
from recorder.cameras.mjpeg_http import MjpegHttpCamera
from recorder.cameras.names import CameraNameError, resolve_camera_name
from recorder.cameras.opencv_source import OpenCVCamera, VideoFileCamera
from recorder.cameras.synthetic import SyntheticCamera, SyntheticFaults, synthetic_faults

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
