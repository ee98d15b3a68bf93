"""The frame-writer thread: encodes frames of the open trial, off the camera thread.

The camera thread hands every captured frame to ``offer`` (a reference, no
copy) and never waits: when more than ``max_pending`` frames are queued, the
frame is counted as dropped instead. Trial start/end travel through the same
queue, so frames and trial boundaries are handled in capture order. Frames
captured before a trial's start are skipped by the trial itself.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from mecharm.common.logging import get_logger
from mecharm.recorder.trial import TrialRecording

__all__ = ["CapturedFrame", "FrameWriter"]

log = get_logger("mecharm.recorder.writer")


@dataclass(frozen=True, slots=True)
class CapturedFrame:
    image: Any
    wall_ts: float
    mono_ns: int
    frozen: bool
    seq: int
    jpeg: bytes | None = None


class FrameWriter:
    """Owns episode.mp4 and frame_log.csv of the trial between its start and end."""

    def __init__(
        self,
        max_pending: int = 45,
        flush_sec: float = 1.0,
        on_media_error: Any = None,
        nice: int = 0,
    ) -> None:
        self.nice = nice
        self.max_pending = max_pending
        self.flush_sec = flush_sec
        self._q: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._pending = 0
        self._lock = threading.Lock()
        self._trial: TrialRecording | None = None
        self._thread = threading.Thread(target=self._run, name="frame-writer", daemon=True)
        self._on_media_error = on_media_error
        self.frames_dropped = 0
        self.frames_written = 0

    def start(self) -> None:
        self._thread.start()

    @property
    def pending(self) -> int:
        return self._pending

    # --- producers --------------------------------------------------------------------------
    def offer(self, frame: CapturedFrame) -> bool:
        """Camera thread: queue a frame, or count it dropped when the writer is behind."""
        with self._lock:
            if self._pending >= self.max_pending:
                self.frames_dropped += 1
                self._q.put(("dropped", frame.mono_ns))
                return False
            self._pending += 1
        self._q.put(("frame", frame))
        return True

    def begin(self, trial: TrialRecording) -> None:
        self._q.put(("start", trial))

    def end(self, trial: TrialRecording) -> Future[None]:
        """Finish the trial's media; the future resolves when the mp4 is closed."""
        fut: Future[None] = Future()
        self._q.put(("end", trial, fut))
        return fut

    def stop(self, timeout: float = 5.0) -> None:
        self._q.put(("stop",))
        if self._thread.is_alive():
            self._thread.join(timeout)

    # --- the thread ---------------------------------------------------------------------------
    def _lower_priority(self) -> None:
        """Linux: raise this thread's nice value; the encoder's worker threads inherit it.

        Encoding is throughput work with a queue in front of it; the event loop
        (frame_request) and the camera read are latency work. Under CPU contention
        the kernel should run those first. (macOS has no per-thread nice: skipped.)
        """
        if self.nice <= 0 or not sys.platform.startswith("linux"):
            return
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self.nice)
        except OSError as exc:
            log.warning("encoder_nice_failed", nice=self.nice, error=str(exc))

    def _run(self) -> None:
        self._lower_priority()
        while True:
            try:
                msg = self._q.get(timeout=self.flush_sec / 2)
            except queue.Empty:
                if self._trial is not None:
                    self._guard(self._trial, self._trial.flush_frame_log)
                continue
            try:
                if not self._handle(msg):
                    return
            except Exception:  # never let one bad message end the writer
                log.exception("frame_writer_error", message=str(msg[0]))

    def _handle(self, msg: tuple[Any, ...]) -> bool:
        """Process one queue message; False means stop."""
        kind = msg[0]
        if kind == "frame":
            with self._lock:
                self._pending -= 1
            trial = self._trial
            if trial is not None:
                f: CapturedFrame = msg[1]
                if self._guard(trial, trial.write_frame, f.image, f.wall_ts, f.mono_ns, f.frozen):
                    self.frames_written += 1
        elif kind == "dropped":
            if self._trial is not None:
                self._trial.count_dropped(msg[1])
        elif kind == "start":
            self._trial = msg[1]
        elif kind == "end":
            self._finish(msg[1], msg[2])
        elif kind == "stop":
            return False
        return True

    def _finish(self, trial: TrialRecording, fut: Future[None]) -> None:
        if self._trial is trial:
            self._trial = None
        try:
            trial.close_media()
        except Exception as exc:
            log.error(
                "video_close_failed", run_stem=trial.run_stem, error=f"{type(exc).__name__}: {exc}"
            )
            self._media_error(trial, exc)
        fut.set_result(None)

    def _guard(self, trial: TrialRecording, fn: Any, *args: Any) -> Any:
        """Run a media operation; on failure stop writing this trial's media (logged once)."""
        try:
            return fn(*args)
        except Exception as exc:
            if not trial.media_failed:
                trial.media_failed = True
                log.error(
                    "media_write_failed",
                    run_stem=trial.run_stem,
                    error=f"{type(exc).__name__}: {exc}",
                )
                self._media_error(trial, exc)
            return None

    def _media_error(self, trial: TrialRecording, exc: BaseException) -> None:
        if self._on_media_error is not None:
            try:
                self._on_media_error(trial, exc)
            except Exception:  # a callback bug must not kill the writer
                log.exception("media_error_callback_failed")
