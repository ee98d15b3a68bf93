"""Video in and out for the export: decode a recording, encode the dataset's constant-rate file.

Output: H.264 (libx264 via PyAV), yuv420p, time base 1/fps, frame ``n`` of the file
has pts ``n`` — so every frame's presentation time is exactly ``n / fps`` (the mp4
muxer stores it as a multiple of 1/(1024·fps), still exact). Episodes are
appended one after the other in the same file, as lerobot concatenates them.

Frames are passed from the decoder to the encoder as yuv420p without any colour
conversion; decoding runs in a worker thread (PyAV releases the GIL inside FFmpeg)
so decoding and encoding overlap. The top camera's MJPEG (docs/lerobot-top-camera.md)
is decoded in its own worker, only the frames the rows use (every JPEG stands
alone), and scaled to the dataset's size there in the one conversion it needs
anyway (full-range JPEG colour to the video's yuv420p).
"""

from __future__ import annotations

import collections
import contextlib
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
from numpy.typing import NDArray

from mecharm.tools.export.recording import RecordingError

__all__ = [
    "ConstantRateWriter",
    "decode_selected",
    "decode_top",
    "jpeg_lowres",
    "resized",
    "sample_rgb",
    "scaled_size",
]

_DONE = object()
#: threads decoding the top camera's JPEGs (each JPEG decodes on one core)
TOP_DECODERS = 2


class ConstantRateWriter:
    """An mp4 whose n-th frame is shown at exactly n / fps seconds."""

    def __init__(
        self, path: Path, *, fps: int, width: int, height: int, preset: str, crf: int, gop: int
    ) -> None:
        self.path = Path(path)
        self.fps = fps
        self.time_base = Fraction(1, fps)
        self.frames = 0
        self.bytes = 0
        self._container: av.container.OutputContainer | None = av.open(
            str(self.path), mode="w", format="mp4"
        )
        try:
            stream = self._container.add_stream("libx264", rate=fps)
            stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
            stream.codec_context.time_base = self.time_base
            stream.codec_context.gop_size = gop
            stream.codec_context.options = {
                "preset": preset,
                "crf": str(crf),
                "x264-params": f"keyint={gop}:min-keyint={gop}:scenecut=0:bframes=0",
            }
        except Exception:
            self._container.close()
            raise
        self._stream = stream
        self.width, self.height = width, height

    def add(self, frame: av.VideoFrame) -> None:
        """Append ``frame`` as the next frame (its own timing is replaced)."""
        if (
            frame.width != self.width
            or frame.height != self.height
            or frame.format.name != "yuv420p"
        ):
            frame = frame.reformat(width=self.width, height=self.height, format="yuv420p")
        frame.pts = self.frames
        frame.time_base = self.time_base
        frame.pict_type = av.video.frame.PictureType.NONE
        if self._container is None:
            raise ValueError(f"{self.path.name}: add() after close()")
        packets = self._stream.encode(frame)
        self.bytes += sum(p.size for p in packets)
        self._container.mux(packets)
        self.frames += 1

    def size_bytes(self) -> int:
        """Encoded bytes so far (the file on disk lags behind the muxer's buffer)."""
        return self.bytes

    def close(self) -> None:
        if self._container is None:
            return
        container, self._container = self._container, None
        try:
            container.mux(self._stream.encode(None))
        finally:
            container.close()


def _first_frames(container: av.container.InputContainer, n: int) -> Iterator[av.VideoFrame]:
    """The first ``n`` frames, from the first ``n`` packets only: what follows them in a
    crashed recording (a fragment cut by the kill) is never fed to the decoder."""
    stream = container.streams.video[0]
    stream.codec_context.thread_type = "SLICE"  # no frame delay: packet k gives frame k
    fed = 0
    for packet in container.demux(stream):
        if fed == n:
            break
        if packet.size:
            fed += 1
            yield from stream.decode(packet)
    yield from stream.decode(None)


def _in_worker(
    produce: Callable[[Callable[[object], None], threading.Event], None], name: str
) -> Iterator[Any]:
    """Run ``produce(put, stop)`` in a thread; yield what it puts, re-raise what it raises."""
    q: queue.Queue[object] = queue.Queue(maxsize=32)
    stop = threading.Event()

    def run() -> None:
        try:
            produce(q.put, stop)
        except av.error.FFmpegError as exc:  # pragma: no cover - producers name the file
            q.put(RecordingError(f"cannot be decoded: {exc}"))
        except BaseException as exc:  # pragma: no cover - handed to the consumer
            q.put(exc)
        finally:
            q.put(_DONE)

    worker = threading.Thread(target=run, name=name, daemon=True)
    worker.start()
    try:
        while True:
            item = q.get()
            if item is _DONE:
                break
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while worker.is_alive():  # drain so the worker never blocks on a full queue
            with contextlib.suppress(queue.Empty):
                q.get(timeout=0.05)
        worker.join()


def decode_selected(
    path: Path, wanted: NDArray[np.int64], expected: int, *, only_first: bool = False
) -> Iterator[tuple[int, av.VideoFrame]]:
    """Yield (frame index, frame) for the frame indices in ``wanted`` (sorted), in order.

    Decodes every frame (H.264 needs its references) in a worker thread. Raises
    RecordingError when the file decodes to a different number of frames than
    ``expected`` or cannot be decoded. ``only_first`` (crashed recordings): decode the
    first ``expected`` frames and ignore the rest of the file.
    """
    want = set(int(i) for i in wanted)

    def produce(put: Callable[[object], None], stop: threading.Event) -> None:
        try:
            with av.open(str(path)) as container:
                stream = container.streams.video[0]
                stream.thread_type = "AUTO"
                n = 0
                frames = (
                    _first_frames(container, expected) if only_first else container.decode(stream)
                )
                for frame in frames:
                    if stop.is_set():
                        return
                    if n in want:
                        put((n, frame))
                    n += 1
                if n != expected:
                    put(
                        RecordingError(
                            f"{path.name} decoded to {n} frames, frame_log lists {expected}"
                        )
                    )
        except av.error.FFmpegError as exc:
            put(RecordingError(f"{path.name} cannot be decoded: {exc}"))

    return _in_worker(produce, f"decode-{path.parent.name}")


def scaled_size(width: int, height: int, target_width: int) -> tuple[int, int]:
    """(width, height) of a ``width`` x ``height`` camera in the dataset: ``target_width``
    wide with the aspect kept (0 or wider than recorded: as recorded), both even (yuv420p)."""
    if target_width <= 0 or target_width >= width:
        w, h = width, height
    else:
        w, h = target_width, round(height * target_width / width)
    return max(2, w - w % 2), max(2, h - h % 2)


def jpeg_lowres(recorded_width: int, width: int) -> int:
    """FFmpeg's ``lowres`` for decoding a ``recorded_width`` JPEG that becomes ``width`` wide:
    2 (1/4) or 3 (1/8) when that size still covers ``width``, else 0. Decoding at 1/4 skips
    most of the inverse DCT (about half the decode time of a 1080p frame); 1/2 is not
    offered: FFmpeg's reduced transform is slower there than its full-size one."""
    for lowres in (3, 2):
        if recorded_width >> lowres >= width:
            return lowres
    return 0


def decode_top(
    path: Path,
    wanted: NDArray[np.int64],
    expected: int,
    size: tuple[int, int],
    recorded_width: int = 0,
) -> Iterator[tuple[int, av.VideoFrame]]:
    """Yield (frame index, yuv420p frame of ``size`` = (width, height)) for the indices in
    ``wanted`` (sorted) of an MJPEG file, in order.

    Only wanted packets are decoded (each JPEG stands alone), by ``TOP_DECODERS``
    threads with a decoder each (FFmpeg decodes one JPEG on one core; a 1080p frame takes
    ~4 ms); the others are counted. The scaling and the JPEG-to-video colour range change
    are one conversion, in the decoding thread (after a reduced decode when the dataset's
    size allows it, ``jpeg_lowres``). Raises RecordingError when a wanted frame does not
    decode or the file holds another number of frames than ``expected``.
    """
    want = set(int(i) for i in wanted)
    width, height = size
    lowres = jpeg_lowres(recorded_width, width)
    local = threading.local()

    def decode_one(data: bytes, n: int) -> av.VideoFrame:
        codec = getattr(local, "codec", None)
        if codec is None:
            codec = local.codec = av.CodecContext.create("mjpeg", "r")
            if lowres:
                codec.options = {"lowres": str(lowres)}
        try:
            frames = codec.decode(av.Packet(data))
        except av.error.FFmpegError as exc:
            raise RecordingError(f"{path.name} frame {n} cannot be decoded: {exc}") from None
        if len(frames) != 1:
            raise RecordingError(f"{path.name} frame {n} does not decode")
        return _to_video(frames[0], width, height)

    def produce(put: Callable[[object], None], stop: threading.Event) -> None:
        n = 0
        pending: collections.deque[tuple[int, Future[av.VideoFrame]]] = collections.deque()
        with ThreadPoolExecutor(TOP_DECODERS, thread_name_prefix="decode-top") as pool:
            try:
                with av.open(str(path)) as container:
                    stream = container.streams.video[0]
                    for packet in container.demux(stream):
                        if stop.is_set():
                            return
                        if not packet.size:
                            continue
                        if n in want:
                            pending.append((n, pool.submit(decode_one, bytes(packet), n)))
                            if len(pending) > 2 * TOP_DECODERS:
                                i, job = pending.popleft()
                                put((i, job.result()))
                        n += 1
            except av.error.FFmpegError as exc:
                put(RecordingError(f"{path.name} cannot be read after frame {n}: {exc}"))
                return
            finally:
                if stop.is_set():
                    for _, job in pending:
                        job.cancel()
            while pending:
                i, job = pending.popleft()
                put((i, job.result()))
        if n != expected:
            put(RecordingError(f"{path.name} holds {n} frames, its frame log lists {expected}"))

    return _in_worker(produce, f"decode-top-{path.parent.name}")


def resized(frame: av.VideoFrame, width: int, height: int) -> av.VideoFrame:
    """A decoded video frame as yuv420p of the dataset's size (area-averaged: no aliasing
    when a camera is scaled down, ``--side-width``)."""
    return frame.reformat(width=width, height=height, format="yuv420p", interpolation="AREA")


def _to_video(frame: av.VideoFrame, width: int, height: int) -> av.VideoFrame:
    """A decoded JPEG (full-range yuvj) as limited-range yuv420p of the dataset's size."""
    full = frame.format.name.startswith("yuvj") or frame.color_range == 2
    return frame.reformat(
        width=width,
        height=height,
        format="yuv420p",
        interpolation="AREA",
        src_color_range="JPEG" if full else None,
        dst_color_range="MPEG",
    )


def sample_rgb(frame: av.VideoFrame, stride: int) -> NDArray[np.uint8]:
    """RGB image for the statistics: every ``stride``-th pixel (lerobot's ``img[:, ::k, ::k]``).

    Converts only the sampled pixels of a yuv420p frame, with the BT.601 limited-range
    matrix FFmpeg applies to untagged video (what a dataset loader will see), instead
    of converting the whole 720p frame first.
    """
    h, w = frame.height, frame.width
    if frame.format.name != "yuv420p" or h % 2 or w % 2 or (stride > 1 and stride % 2):
        return np.ascontiguousarray(frame.to_ndarray(format="rgb24")[::stride, ::stride])
    planes = frame.to_ndarray()  # (h * 3 / 2, w): Y, then U and V at quarter size
    y = planes[:h:stride, ::stride].astype(np.float32)
    cs = max(1, stride // 2)
    flat = planes.reshape(-1)
    q = (h // 2) * (w // 2)
    u_full = flat[h * w : h * w + q].reshape(h // 2, w // 2)
    v_full = flat[h * w + q : h * w + 2 * q].reshape(h // 2, w // 2)
    if stride > 1:
        u, v = u_full[::cs, ::cs], v_full[::cs, ::cs]
    else:
        u = np.repeat(np.repeat(u_full, 2, 0), 2, 1)
        v = np.repeat(np.repeat(v_full, 2, 0), 2, 1)
    u = u[: y.shape[0], : y.shape[1]].astype(np.float32) - 128.0
    v = v[: y.shape[0], : y.shape[1]].astype(np.float32) - 128.0
    luma = (y - 16.0) * 1.164383
    rgb = np.stack(
        [luma + 1.596027 * v, luma - 0.391762 * u - 0.812968 * v, luma + 2.017232 * u], axis=-1
    )
    return np.clip(np.rint(rgb), 0, 255).astype(np.uint8)
