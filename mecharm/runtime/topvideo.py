"""The top camera as video through the whole trial, written beside the trial, never in its way.

The runtime holds the top camera (on the rig a USB webcam only one process can open), so it
records it too (docs/top-camera.md): a tap on the camera's reader thread offers every frame
to ``TopVideoWriter.offer``, which keeps at most ``top_video_fps`` of them and puts them in a
bounded queue (full: the frame is dropped and counted, the camera never waits); the writer's
own thread stores the camera's JPEG bytes as MJPEG packets in a Matroska file (no encoding;
a source that delivers pixels is JPEG-encoded there) and one row per packet in the frame log
``frame_idx,capture_ts,mono_ns``, flushed as it goes. Whatever goes wrong on that side (disk
full, slow disk, an error, a dead thread) only loses top frames: the trial's decisions and
timing never depend on it, and the run log's ``top_video`` says what was lost and why.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, BinaryIO

import av
import cv2
import numpy as np

from mecharm.cameras import CameraSource
from mecharm.cameras.jpeg import jpeg_size
from mecharm.common.fsutil import DataRootGuard, LineFile, atomic_write_bytes, describe_os_error
from mecharm.common.logging import get_logger

__all__ = [
    "FRAME_LOG_HEADER",
    "TopVideo",
    "TopVideoStatus",
    "TopVideoWriter",
    "open_video_file",
    "top_video_off",
]

log = get_logger("mecharm.runtime.topvideo")

FRAME_LOG_HEADER = "frame_idx,capture_ts,mono_ns\n"
#: packet time stamps in milliseconds of the capture's monotonic clock (Matroska's own unit)
TIME_BASE = Fraction(1, 1000)
#: a raw-frame source's frames are stored as JPEG of this quality
RAW_JPEG_QUALITY = 90
#: how often the writer asks the data-root guard whether the root is still the session's own
#: and how much room is left
GUARD_EVERY_S = 1.0
#: the video stops when less than this would stay free on the data root: the trial's own
#: records (trace, ledger row, run log, stage images) and the side video come first, and
#: a video must never be what fills the disk under them (docs/top-camera.md)
MIN_FREE_BYTES = 256 * 1024 * 1024
#: a recording starts with the camera's newest frame when it is at most this old: the video
#: then covers the trial's first instant instead of waiting up to a frame period (longer on
#: a loaded machine) for the next one; an older frame means the camera stalled, and the
#: recording begins with the next frame instead (docs/top-camera.md, "The first frame")
PREROLL_MAX_AGE_S = 1.0


class _Stopped(Exception):
    """The writer stops on purpose (the data root is not the session's, or nearly full)."""


def open_video_file(path: Path) -> BinaryIO:
    """The video file's handle (the one place the writer meets the disk; tests replace it)."""
    return open(path, "xb")


@dataclass
class TopVideoStatus:
    """The run log's ``top_video``: ok (every kept frame written), partial (some lost),
    failed (none written), off (not recorded by choice)."""

    status: str
    frames: int = 0
    dropped: int = 0
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "frames": self.frames,
            "dropped": self.dropped,
            "reason": self.reason,
        }


def top_video_off(reason: str) -> dict[str, Any]:
    return TopVideoStatus("off", reason=reason).to_dict()


class TopVideoWriter:
    """One trial's ``top_camera.mkv`` and ``top_frame_log.csv``, written by one thread."""

    def __init__(
        self,
        video: Path,
        frame_log: Path,
        *,
        fps: float = 10.0,
        queue_size: int = 30,
        guard: DataRootGuard | None = None,
    ) -> None:
        self.video, self.frame_log = Path(video), Path(frame_log)
        # kept when at least 0.8 frame periods passed since the last kept one: a camera at
        # exactly fps, with jitter, keeps every frame; a faster one is thinned to about fps
        self._min_gap_ns = round(0.8e9 / fps) if fps > 0 else 0
        self._q: queue.Queue[Any] = queue.Queue(maxsize=max(1, int(queue_size)))
        self.guard = guard
        self.frames = 0
        self.offered = 0
        # counted by two threads, each its own: the tap (queue full) and the writer (lost
        # after or in a failure)
        self._dropped_full = 0
        self._lost = 0
        self.error: str | None = None
        self._failed = False  # the tap's view of ``error`` (one attribute read, no lock)
        self._closed = False
        self._last_kept: int | None = None
        #: CPU seconds the writer thread used (set when it ends; the bench reports it)
        self.cpu_s = 0.0
        self._thread = threading.Thread(target=self._run, name="top-video", daemon=True)
        # owned by the writer thread
        self._fh: BinaryIO | None = None
        self._container: Any = None
        self._stream: Any = None
        self._log: LineFile | None = None
        self._mono0 = 0
        self._last_pts = -1
        self._guard_at: int | None = None
        self._room_at: int | None = None

    # ------------------------------------------------------------------ the tap
    def offer(self, data: Any, wall_ts: float, mono_ns: int) -> None:
        """The camera tap, on the camera's reader thread: keep or skip, queue or drop; never
        blocks, never writes, never raises."""
        if self._closed:
            return
        last = self._last_kept
        if last is not None and mono_ns - last < self._min_gap_ns:
            return
        self._last_kept = mono_ns
        self.offered += 1
        if self._failed:
            self._dropped_full += 1
            return
        try:
            self._q.put_nowait((data, wall_ts, mono_ns))
        except queue.Full:
            self._dropped_full += 1

    @property
    def dropped(self) -> int:
        """Kept frames that never reached the file (queue full, or lost to a failure)."""
        return self._dropped_full + self._lost

    # ------------------------------------------------------------------ life cycle
    def start(self) -> None:
        self._thread.start()

    def stop(self, wait_s: float) -> TopVideoStatus:
        """No more frames; wait up to ``wait_s`` for the queued ones to be written and the file
        closed. A writer still busy after that (a stalled disk) is left to finish alone."""
        self._closed = True  # the writer drains what is queued, then closes the files
        with contextlib.suppress(queue.Full):
            self._q.put_nowait(None)  # wakes it now; the last item, the tap puts no more
        self._thread.join(wait_s)
        if self._thread.is_alive():
            left = self._q.qsize()
            self._fail(f"writer still busy after {wait_s:g} s (slow disk); last frames may be lost")
            st = self.status()
            st.dropped += left
            return st
        return self.status()

    def status(self) -> TopVideoStatus:
        if self.frames == 0:
            why = self.error or (
                "no frame from the top camera" if self.offered == 0 else "no frame written"
            )
            return TopVideoStatus("failed", 0, self.dropped, why)
        if self.error is not None or self.dropped:
            why = self.error or f"{self.dropped} frame(s) dropped: the writer fell behind"
            return TopVideoStatus("partial", self.frames, self.dropped, why)
        return TopVideoStatus("ok", self.frames, 0, "")

    def _fail(self, why: str) -> None:
        if self.error is None:
            self.error = why
            log.warning("top_video_failed", video=str(self.video), reason=why)
        self._failed = True

    # ------------------------------------------------------------------ the writer thread
    def _run(self) -> None:
        cpu0 = time.thread_time()
        try:
            while True:
                try:
                    item = self._q.get(timeout=0.1)
                except queue.Empty:
                    if self._closed:
                        break
                    continue
                if item is None:
                    break
                if self._failed:
                    self._lost += 1
                    continue
                try:
                    self._write(*item)
                except _Stopped as exc:
                    self._lost += 1
                    self._fail(str(exc))
                except Exception as exc:  # disk full, I/O error, odd data: top frames only
                    self._lost += 1
                    self._fail(describe_os_error(exc, f"writing {self.video.name}"))
        except BaseException as exc:  # never silent, even for what should not happen
            self._fail(f"writer thread died: {type(exc).__name__}: {exc}")
        finally:
            self._close()
            self.cpu_s = time.thread_time() - cpu0

    def _write(self, data: Any, wall_ts: float, mono_ns: int) -> None:
        every = GUARD_EVERY_S * 1e9
        if self.guard is not None and (self._guard_at is None or mono_ns - self._guard_at >= every):
            self._guard_at = mono_ns
            problem = self.guard.problem()
            if problem is not None:
                raise _Stopped(f"stopped: {problem}")
        if self._room_at is None or mono_ns - self._room_at >= every:
            self._room_at = mono_ns
            st = os.statvfs(self.video.parent)
            free = st.f_bavail * st.f_frsize
            if free < MIN_FREE_BYTES:
                raise _Stopped(
                    f"stopped: {free / 1e6:.0f} MB free on the data root, less than the "
                    f"{MIN_FREE_BYTES / 1e6:.0f} MB kept for the trial's records"
                )
        if isinstance(data, (bytes, bytearray, memoryview)):
            jpeg = bytes(data)
        else:
            ok, buf = cv2.imencode(
                ".jpg", np.asarray(data), [cv2.IMWRITE_JPEG_QUALITY, RAW_JPEG_QUALITY]
            )
            if not ok:
                raise ValueError("frame could not be JPEG-encoded")
            jpeg = buf.tobytes()
        if self._container is None:
            self._open(jpeg, mono_ns)
        pts = max(self._last_pts + 1, (mono_ns - self._mono0) // 1_000_000)
        packet = av.Packet(jpeg)
        packet.stream = self._stream
        packet.pts = packet.dts = pts
        packet.time_base = TIME_BASE
        packet.is_keyframe = True
        self._container.mux(packet)
        self._last_pts = pts
        assert self._log is not None
        self._log.write(f"{self.frames},{wall_ts:.6f},{mono_ns}\n")
        self._log.flush()
        self.frames += 1

    def _open(self, jpeg: bytes, mono_ns: int) -> None:
        size = jpeg_size(jpeg)
        if size is None:
            img = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
            if img is None:
                raise ValueError("the top camera's first frame is not a JPEG")
            size = (img.shape[1], img.shape[0])
        self._fh = open_video_file(self.video)
        self._container = av.open(self._fh, "w", format="matroska")
        stream = self._container.add_stream("mjpeg", rate=10)
        stream.width, stream.height = size
        stream.pix_fmt = "yuvj420p"
        stream.time_base = TIME_BASE
        self._stream = stream
        self._log = LineFile(self.frame_log, truncate=True)
        self._log.write(FRAME_LOG_HEADER)
        self._log.flush()
        self._mono0 = mono_ns

    def _close(self) -> None:
        for what, close in (
            ("video", lambda: self._container.close() if self._container is not None else None),
            ("video file", lambda: self._fh.close() if self._fh is not None else None),
            ("frame log", lambda: self._log.close() if self._log is not None else None),
        ):
            try:
                close()
            except Exception as exc:
                self._fail(describe_os_error(exc, f"closing the {what}"))
        self._container = self._fh = self._log = None


def cut_log_to_video(video: Path, frame_log: Path, aside: Path) -> int:
    """After the runtime was killed mid-trial: ``frame_log`` lists every frame handed to the
    writer, ``video`` holds those whose packets reached the disk whole (the file is written
    through a buffer, the log line by line). Cut the log to the whole packets, keeping the
    original at ``aside`` (never overwritten), so log rows and frames pair again; returns the
    rows removed (0: nothing to do). Raises OSError when the files cannot be read or written.
    (docs/runtime.md, "Interrupted trials")"""
    whole = 0
    try:
        with av.open(str(video)) as container:
            if container.streams.video:
                stream = container.streams.video[0]
                for packet in container.demux(stream):
                    if packet.size and jpeg_size(bytes(packet), whole=True) is not None:
                        whole += 1
                    elif packet.size:
                        break  # the cut packet: nothing after it reached the disk
    except av.error.FFmpegError:
        pass  # a file cut before its first cluster holds no frame
    lines = frame_log.read_text(encoding="utf-8").splitlines(keepends=True)
    rows = [ln for ln in lines[1:] if ln.endswith("\n")]
    if len(rows) <= whole:
        return 0
    if not aside.exists():
        atomic_write_bytes(aside, "".join(lines).encode("utf-8"))
    atomic_write_bytes(frame_log, (lines[0] + "".join(rows[:whole])).encode("utf-8"))
    return len(rows) - whole


class TopVideo:
    """The session's top-camera recording: a tap on ``camera`` and one writer per trial.

    ``camera`` must see every frame on its own thread (``taps_every_frame``; the service wraps
    a read-on-demand source in ``ThreadedCamera``)."""

    def __init__(
        self,
        camera: CameraSource,
        *,
        fps: float = 10.0,
        queue_size: int = 30,
        guard: DataRootGuard | None = None,
        stop_wait_s: float = 2.0,
    ) -> None:
        if not camera.taps_every_frame:
            raise ValueError(
                f"top camera {camera.spec}: reads on demand; wrap it in ThreadedCamera to record it"
            )
        self.camera, self.fps, self.queue_size = camera, fps, queue_size
        self.guard, self.stop_wait_s = guard, stop_wait_s
        self._writer: TopVideoWriter | None = None
        self._refused: str | None = None
        self.last_cpu_s = 0.0

    def start(self, video: Path, frame_log: Path) -> None:
        """Record from now on into ``video`` / ``frame_log`` (the trial's run folder exists)."""
        self.abandon()
        problem = self.guard.problem() if self.guard is not None else None
        if problem is not None:  # written only while the data root is the session's own
            self._refused = f"not recorded: {problem}"
            return
        self._refused = None
        w = TopVideoWriter(
            video, frame_log, fps=self.fps, queue_size=self.queue_size, guard=self.guard
        )
        w.start()
        self._writer = w
        newest = self.camera.newest()  # before the tap: its frames are never older than this
        if newest is not None and time.monotonic_ns() - newest[2] <= PREROLL_MAX_AGE_S * 1e9:
            w.offer(*newest)
        self.camera.add_tap(w.offer)

    def stop(self) -> dict[str, Any]:
        """Stop recording; the run log's ``top_video`` (blocks up to ``stop_wait_s``)."""
        w, self._writer = self._writer, None
        if w is None:
            return TopVideoStatus("failed", reason=self._refused or "not started").to_dict()
        self.camera.remove_tap(w.offer)
        st = w.stop(self.stop_wait_s)
        self.last_cpu_s = w.cpu_s
        log.info("top_video", video=str(w.video), cpu_s=round(w.cpu_s, 3), **st.to_dict())
        return st.to_dict()

    def abandon(self) -> None:
        """A trial cut short (cancelled, or ended by an exception): stop taking frames now, let
        the writer write what is queued and close alone."""
        w, self._writer = self._writer, None
        if w is not None:
            self.camera.remove_tap(w.offer)
            w._closed = True
            with contextlib.suppress(queue.Full):
                w._q.put_nowait(None)
