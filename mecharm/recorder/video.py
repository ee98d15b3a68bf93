"""H.264 fragmented-MP4 writer (PyAV) whose PTS are the frames' real capture times.

Why fragmented MP4 (``frag_keyframe+empty_moov+default_base_moof``): a plain
MP4 writes its index at close, so a killed recorder leaves an unplayable file
(the reference rig's weakness, docs/recorder.md). Here the muxer closes a
self-describing fragment (moof + mdat) every ``fragment_sec`` of capture time
(``frag_duration``) and at every keyframe, and writes it straight to the file
(``flush_packets``), so a SIGKILL loses at most the open fragment: about
``fragment_sec`` of encoded video, whatever rate the camera delivers
(docs/recorder.md, "Crashed recordings"). ``tune=zerolatency`` turns off B-frames
and lookahead, so the encoder does not hold frames back either.

Keyframes follow capture time too: one every ``gop_sec`` (forced when the camera
is slower than ``container_fps``, where a GOP counted in frames would grow past a
second), and at most every ``gop`` frames.

PTS: ``(capture_mono_ns - anchor_mono_ns)`` in a fine time base (1/90000 s by
default); the container fps is nominal only. ``anchor_mono_ns`` is the first
frame's capture time, recorded with its wall time in the meta.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any, cast

import av
import cv2
import numpy as np
from av.video.frame import PictureType
from numpy.typing import NDArray

from mecharm.recorder.config import VideoSettings

__all__ = ["VideoWriter", "bgr_to_i420"]

MOVFLAGS = "frag_keyframe+empty_moov+default_base_moof"
#: full-range (JPEG) chroma to the limited range of BT.601 yuv420p: 224 levels around 128
_CHROMA_GAIN = 224 / 255
_CHROMA_OFFSET = 128 * (1 - _CHROMA_GAIN)


def bgr_to_i420(image: NDArray[Any]) -> NDArray[np.uint8]:
    """BGR (even width and height) to I420, BT.601 limited range, each chroma sample the
    mean of its 2x2 block, as FFmpeg's own scaler does.

    Why not ``cv2.COLOR_BGR2YUV_I420`` alone: it takes each block's top-left pixel, so
    the chroma keeps the camera's sensor noise (and aliases edges); x264 then spends a
    fifth more bytes, and their CPU, coding that noise. Why not PyAV's own conversion
    (FFmpeg's scaler): twice this one's CPU (docs/recorder.md, "Encoder cost").
    """
    h, w = image.shape[:2]
    yuv = cv2.cvtColor(image, cv2.COLOR_BGR2YUV_I420)  # the Y plane; its chroma is replaced
    half = cv2.resize(image, (w // 2, h // 2), interpolation=cv2.INTER_AREA)  # 2x2 means
    ycrcb = cv2.cvtColor(half, cv2.COLOR_BGR2YCrCb)
    flat = yuv.reshape(-1)
    n = (h // 2) * (w // 2)
    u = flat[h * w : h * w + n].reshape(h // 2, w // 2)
    v = flat[h * w + n :].reshape(h // 2, w // 2)
    cv2.mixChannels([ycrcb], [u, v], [2, 0, 1, 1])  # Cb -> U, Cr -> V, in place
    chroma = flat[h * w :]
    cv2.convertScaleAbs(chroma, dst=chroma, alpha=_CHROMA_GAIN, beta=_CHROMA_OFFSET)
    return cast(NDArray[np.uint8], yuv)


class VideoWriter:
    """Encode BGR frames into ``path``; created on the first frame (it fixes the size)."""

    def __init__(self, path: Path, settings: VideoSettings | None = None) -> None:
        self.path = Path(path)
        self.settings = settings or VideoSettings()
        self.time_base = Fraction(1, self.settings.time_base_hz)
        self.gop = max(1, round(self.settings.gop_sec * self.settings.container_fps))
        self._gop_ns = round(self.settings.gop_sec * 1e9)
        self._last_key_ns: int | None = None
        self.keyframes = 0
        self.width = 0
        self.height = 0
        self.frames_written = 0
        self.anchor_mono_ns: int | None = None
        self._last_pts = -1
        self._container: av.container.OutputContainer | None = None
        self._stream: av.video.stream.VideoStream | None = None
        self.closed = False

    def _open(self, width: int, height: int) -> None:
        s = self.settings
        # the muxer writes straight to the file: no Python-side buffering to lose on a kill
        container = av.open(
            str(self.path),
            mode="w",
            format="mp4",
            options={
                "movflags": MOVFLAGS,
                "frag_duration": str(round(s.fragment_sec * 1_000_000)),  # microseconds
                "flush_packets": "1",
            },
        )
        try:
            rate = Fraction(s.container_fps).limit_denominator(1001)
            stream = cast(av.video.stream.VideoStream, container.add_stream(s.codec, rate=rate))
            stream.width, stream.height = width, height
            stream.pix_fmt = s.pix_fmt
            stream.time_base = self.time_base
            stream.codec_context.time_base = self.time_base
            stream.codec_context.gop_size = self.gop
            opts = {"preset": s.preset, "crf": str(s.crf)}
            if s.codec == "libx264":
                opts["x264-params"] = f"keyint={self.gop}:min-keyint={self.gop}:scenecut=0"
                if s.tune != "none":
                    opts["tune"] = s.tune
            stream.codec_context.options = opts
            if s.threads:
                stream.codec_context.thread_count = s.threads
        except Exception:
            container.close()
            raise
        self._container, self._stream = container, stream
        self.width, self.height = width, height

    def write(self, image: NDArray[Any], mono_ns: int) -> bool:
        """Encode one frame captured at ``mono_ns``; False if its size differs (skipped).

        Raises OSError/av.error.FFmpegError when the file cannot be written.
        """
        h, w = image.shape[:2]
        if self._container is None:
            if self.closed:
                raise ValueError("write() after close()")
            self._open(w - w % 2, h - h % 2)
            self.anchor_mono_ns = mono_ns
        if (w - w % 2, h - h % 2) != (self.width, self.height):
            return False
        if w != self.width or h != self.height:
            image = image[: self.height, : self.width]
        assert self.anchor_mono_ns is not None and self._stream is not None
        pts = (mono_ns - self.anchor_mono_ns) * self.settings.time_base_hz // 1_000_000_000
        if pts <= self._last_pts:
            pts = self._last_pts + 1  # PTS must rise strictly; clocks never repeat, but be safe
        self._last_pts = pts
        yuv = bgr_to_i420(np.ascontiguousarray(image))
        if self.height % 4 == 0:  # no copy: the frame holds the array (PyAV misreads h % 4 != 0)
            frame = av.VideoFrame.from_numpy_buffer(yuv, format="yuv420p")
        else:
            frame = av.VideoFrame.from_ndarray(yuv, format="yuv420p")
        frame.pts = pts
        frame.time_base = self.time_base
        if self._last_key_ns is None or mono_ns - self._last_key_ns >= self._gop_ns:
            frame.pict_type = PictureType.I  # a keyframe per gop_sec of capture time
        assert self._container is not None
        packets = self._stream.encode(frame)
        if any(p.is_keyframe for p in packets):  # forced, or x264's own every `gop` frames
            self._last_key_ns = mono_ns
            self.keyframes += 1
        self._container.mux(packets)
        self.frames_written += 1
        return True

    def close(self) -> None:
        """Flush the encoder and finish the file; safe to call twice."""
        if self.closed:
            return
        self.closed = True
        container, stream = self._container, self._stream
        self._container = self._stream = None
        if container is None:
            return
        try:
            if stream is not None:
                container.mux(stream.encode(None))
        finally:
            container.close()

    @property
    def codec_name(self) -> str:
        return (
            "h264"
            if self.settings.codec in ("libx264", "h264", "libopenh264")
            else self.settings.codec
        )
