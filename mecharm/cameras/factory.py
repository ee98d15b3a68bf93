"""``open_camera(spec)``: one string names any camera source.

==========================================  ====================================
spec                                        source
==========================================  ====================================
``synthetic`` / ``synthetic?fps=30&w=1280``  SyntheticCamera (keys: fps, w, h, id,
                                            freeze_after, disconnect_after)
``0``, ``1`` ...                            OpenCV device index
``name:Iriun``                              device resolved by name (cameras/names.py)
``http://host:port/side.mjpg``              MjpegHttpCamera (own MJPEG reader)
``rtsp://...``, ``https://...``             OpenCV/FFmpeg stream
a path to a video file                      VideoFileCamera (looped)
==========================================  ====================================
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qsl

from mecharm.cameras.base import CameraSource
from mecharm.cameras.mjpeg_http import MjpegHttpCamera
from mecharm.cameras.names import resolve_camera_name
from mecharm.cameras.opencv_source import OpenCVCamera, VideoFileCamera
from mecharm.cameras.synthetic import SyntheticCamera

__all__ = ["is_synthetic", "make_camera", "open_camera", "parse_synthetic"]

_SYNTH_KEYS: dict[str, tuple[str, Callable[[str], object]]] = {
    "fps": ("fps", float),
    "w": ("width", int),
    "width": ("width", int),
    "h": ("height", int),
    "height": ("height", int),
    "id": ("camera_id", str),
    "freeze_after": ("freeze_after", float),
    "disconnect_after": ("disconnect_after", float),
}


def parse_synthetic(spec: str) -> SyntheticCamera:
    """Build a SyntheticCamera from ``synthetic[?key=value&...]``; ValueError names a bad key."""
    _, _, query = spec.partition("?")
    kwargs: dict[str, object] = {}
    for key, value in parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)):
        if key not in _SYNTH_KEYS:
            raise ValueError(
                f"camera spec {spec!r}: unknown synthetic option {key!r} "
                f"(known: {', '.join(sorted(_SYNTH_KEYS))})"
            )
        name, conv = _SYNTH_KEYS[key]
        try:
            kwargs[name] = conv(value)
        except ValueError:
            raise ValueError(
                f"camera spec {spec!r}: option {key}={value!r} is not a valid {conv.__name__}"
            ) from None
    return SyntheticCamera(**kwargs)  # type: ignore[arg-type]


def is_synthetic(spec: str) -> bool:
    """A generated test card, not a camera: allowed only when asked for by name, and its
    recordings are marked so (docs/recorder.md, "The side camera must be asked for")."""
    spec = spec.strip()
    return spec == "synthetic" or spec.startswith("synthetic?")


def _by_name(spec: str) -> CameraSource:
    name = spec.removeprefix("name:")
    return OpenCVCamera(resolve_camera_name(name), spec=spec)


def _file(spec: str) -> CameraSource:
    if not Path(spec).is_file():
        raise ValueError(
            f"camera spec {spec!r} is not a source: expected synthetic[?...], an index, "
            "name:NAME, http://... (MJPEG), rtsp://..., or an existing video file"
        )
    return VideoFileCamera(spec)


_RULES: list[tuple[Callable[[str], bool], Callable[[str], CameraSource]]] = [
    (is_synthetic, parse_synthetic),
    (str.isdigit, lambda s: OpenCVCamera(int(s), spec=s)),
    (lambda s: s.startswith("name:"), _by_name),
    (lambda s: s.startswith("http://"), MjpegHttpCamera),
    (lambda s: "://" in s, lambda s: OpenCVCamera(s)),
    (lambda s: True, _file),
]


def make_camera(spec: str) -> CameraSource:
    """The (not yet opened) source for ``spec``; ValueError/CameraNameError when invalid."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError("camera spec is empty")
    spec = spec.strip()
    for matches, build in _RULES:
        if matches(spec):
            return build(spec)
    raise AssertionError("unreachable")  # the last rule matches everything


def open_camera(spec: str) -> CameraSource:
    """Build and open the source for ``spec``; raises CameraOpenError if it cannot open."""
    cam = make_camera(spec)
    cam.open()
    return cam
