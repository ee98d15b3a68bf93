"""One trial's recording folder: states.csv, frame_log.csv, episode.mp4, meta, extracted/.

Ownership across threads (see service.py): the event-loop thread creates the
trial, writes ``states.csv`` and, after the writer thread has finished the
video, writes ``recording_meta.json``. The frame-writer thread alone touches
``episode.mp4`` and ``frame_log.csv`` between the "start" and "end" messages.
"""

from __future__ import annotations

import contextlib
import csv
import time
from pathlib import Path
from typing import Any

from mecharm.common.dirlock import lock_dir, unlock_dir
from mecharm.common.framegaps import stall_problem
from mecharm.common.fsutil import LineFile, atomic_write_json, safe_join
from mecharm.common.layout import DEFAULT_TASK, DataRoot, RecordingFiles
from mecharm.recorder.config import RecorderSettings
from mecharm.recorder.events import (
    FRAME_LOG_COLUMNS,
    STATES_COLUMNS,
    Arrival,
    Commanded,
    FrameRequest,
    Gripper,
    Measured,
    RecordingMeta,
    Stage,
    TrialEnd,
    TrialStart,
)
from mecharm.recorder.video import VideoWriter

__all__ = ["TrialExistsError", "TrialRecording", "recording_dir", "state_row"]

#: severity order for the final status: the worst thing that happened wins
_SEVERITY = {"ok": 0, "stalled": 1, "truncated": 2, "camera_lost": 3, "mount_lost": 4}


class TrialExistsError(FileExistsError):
    """A recording for this run_stem already exists; it is never overwritten."""


def recording_dir(root: Path, run_stem: str, task: str = DEFAULT_TASK) -> Path:
    """The trial's recording folder (docs/data-root.md); names validated, stays in root
    even through symlinks."""
    return safe_join(root, *DataRoot.recording_rel(run_stem, task).parts)


def _num(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def state_row(event: Any, stage: str, note: str = "") -> list[str]:
    """The states.csv row (STATES_COLUMNS) for one event."""
    row: dict[str, Any] = {"ts": event.ts, "event_type": event.type, "stage": stage, "note": note}
    if isinstance(event, Commanded | Measured):
        row.update({f"j{i}": a for i, a in enumerate(event.angles)})
    if isinstance(event, Commanded | Arrival):
        row.update(
            ts_send=event.ts_send,
            ts_arrival=event.ts_arrival,
            attempt=event.attempt,
            arrived=event.arrived,
            note=event.note,
        )
        if isinstance(event, Commanded):
            row["speed"] = event.speed
    elif isinstance(event, Gripper):
        row.update(gripper_state=event.state, note=event.note)
    elif isinstance(event, Stage):
        row["stage"] = event.stage
    elif isinstance(event, TrialStart | TrialEnd):
        row["note"] = note or event.run_stem
    elif isinstance(event, FrameRequest):
        row["note"] = note or event.tag
    return [_num(row.get(c)) for c in STATES_COLUMNS]


class TrialRecording:
    """Files and counters of one trial. Create with ``TrialRecording.create``."""

    def __init__(
        self,
        root: Path,
        run_stem: str,
        settings: RecorderSettings,
        camera_spec: str,
        task: str = DEFAULT_TASK,
    ) -> None:
        self.root = Path(root)
        self.run_stem = run_stem
        self.settings = settings
        self.camera_spec = camera_spec
        self.dir = recording_dir(self.root, run_stem, task)
        self.files = RecordingFiles(self.dir)
        self.extracted = self.files.snapshots
        self.rel_path = str(DataRoot.recording_rel(run_stem, task))
        self.started_ts = time.time()
        self.start_mono_ns = time.monotonic_ns()
        self.ended_ts: float | None = None
        self.status = "ok"
        self.reasons: list[str] = []
        self.stage = ""
        # counters (writer thread: frames_*; loop thread: states_rows, frame_requests)
        self.frames_captured = 0
        self.frames_written = 0
        self.frames_dropped = 0
        self.states_rows = 0
        self.frame_requests = 0
        #: datagrams dropped while this trial was open, by reason (service.handle_datagram)
        self.events_refused: dict[str, int] = {}
        self.camera_lost_count = 0
        self.camera_frozen = False
        self.frozen_sec = 0.0
        self.first_capture: tuple[float, int] | None = None
        self.last_capture: tuple[float, int] | None = None
        #: the capture time of every frame written (frame_log.csv's), for the quality rule
        self.capture_ts: list[float] = []
        self.media_failed = False
        #: monotonic deadline for the backlog once the trial is closing (None while open)
        self.close_deadline: float | None = None
        self.frames_dropped_at_close = 0
        self.video = VideoWriter(self.files.video, settings.video)
        self._states_fh: LineFile | None = None
        self._states: Any = None
        self._flog_fh: LineFile | None = None
        self._flog: Any = None
        self._states_flushed = time.monotonic()
        self._flog_flushed = time.monotonic()
        #: the folder's flock, held from create() until the meta is written (release()):
        #: a free folder without a meta was abandoned (docs/recorder.md, "Crashed recordings")
        self._lock_fd: int | None = None

    @classmethod
    def create(
        cls,
        root: Path,
        run_stem: str,
        settings: RecorderSettings,
        camera_spec: str,
        task: str = DEFAULT_TASK,
    ) -> TrialRecording:
        """Make the folder and open both CSVs (headers written). Raises OSError, TrialExistsError."""
        trial = cls(root, run_stem, settings, camera_spec, task)
        if trial.files.video.exists() or trial.files.meta.exists():
            raise TrialExistsError(f"a recording for {run_stem} already exists in {trial.rel_path}")
        trial.extracted.mkdir(parents=True, exist_ok=True)
        trial._lock_fd = lock_dir(trial.dir)  # DirBusyError: a repair is rewriting this folder
        try:
            # whole rows only, even when the disk fills mid-write (docs/reliability.md)
            trial._states_fh = LineFile(trial.files.states, truncate=True)
            trial._states = csv.writer(trial._states_fh)
            trial._states.writerow(STATES_COLUMNS)
            trial._flog_fh = LineFile(trial.files.frame_log, truncate=True)
            trial._flog = csv.writer(trial._flog_fh)
            trial._flog.writerow(FRAME_LOG_COLUMNS)
            trial._states_fh.flush()
            trial._flog_fh.flush()
        except OSError:
            trial._close_files()
            trial.release()
            raise
        return trial

    def release(self) -> None:
        """Drop the folder's lock: the recording is finished (meta written, or it never will be)."""
        fd, self._lock_fd = self._lock_fd, None
        unlock_dir(fd)

    # --- status ---------------------------------------------------------------------------
    def mark(self, status: str, reason: str) -> None:
        """Record something that happened; the most severe status is kept."""
        if _SEVERITY[status] > _SEVERITY[self.status]:
            self.status = status
        self.reasons.append(reason)

    # --- loop thread: states --------------------------------------------------------------
    def add_event(self, event: Any, note: str = "") -> None:
        if isinstance(event, Stage):
            self.stage = event.stage
        if self._states is None:
            return
        self._states.writerow(state_row(event, self.stage, note))
        self.states_rows += 1

    def _flush_due(self, fh: Any, last: float, force: bool) -> float:
        """Flush ``fh`` when forced or ``csv_flush_sec`` has passed since ``last``; the new last."""
        now = time.monotonic()
        if fh is not None and (force or now - last >= self.settings.csv_flush_sec):
            fh.flush()
            return now
        return last

    def flush_states(self, force: bool = False) -> None:
        self._states_flushed = self._flush_due(self._states_fh, self._states_flushed, force)

    def close_states(self) -> None:
        fh, self._states_fh, self._states = self._states_fh, None, None
        if fh is not None:
            fh.close()  # flush + fsync; closed even when they fail

    # --- writer thread: frames ------------------------------------------------------------
    def count_dropped(self, mono_ns: int) -> None:
        if mono_ns >= self.start_mono_ns:
            self.frames_captured += 1
            self.frames_dropped += 1

    def write_frame(self, image: Any, wall_ts: float, mono_ns: int, frozen: bool) -> bool:
        """Encode and log one frame; False if skipped. Raises OSError/av errors on I/O failure."""
        if mono_ns < self.start_mono_ns:
            return False  # captured before the trial began
        self.frames_captured += 1
        if self.media_failed or self._flog is None:
            self.frames_dropped += 1
            return False
        if self.close_deadline is not None and time.monotonic() > self.close_deadline:
            self.frames_dropped += 1  # backlog past the close budget: the meta must not wait
            self.frames_dropped_at_close += 1
            return False
        if frozen:
            if self.last_capture is not None:
                self.frozen_sec += (mono_ns - self.last_capture[1]) / 1e9
            self.camera_frozen = True
        if not self.video.write(image, mono_ns):
            self.frames_dropped += 1  # size changed after a reconnect
            return False
        self._flog.writerow((self.frames_written, repr(wall_ts), mono_ns))
        # every row reaches the file with its frame: the mp4 on disk then never holds a
        # frame that frame_log.csv does not list, even after a SIGKILL, so a repair only
        # ever cuts rows (docs/recorder.md, "Crashed recordings"); one small write a frame
        assert self._flog_fh is not None
        self._flog_fh.flush()
        self.frames_written += 1
        self.capture_ts.append(wall_ts)
        if self.first_capture is None:
            self.first_capture = (wall_ts, mono_ns)
        self.last_capture = (wall_ts, mono_ns)
        return True

    def flush_frame_log(self, force: bool = False) -> None:
        self._flog_flushed = self._flush_due(self._flog_fh, self._flog_flushed, force)

    def close_media(self) -> None:
        """Writer thread: finish the video and the frame log."""
        try:
            self.video.close()
        finally:
            fh, self._flog_fh, self._flog = self._flog_fh, None, None
            if fh is not None:
                fh.close()

    def _close_files(self) -> None:
        for name in ("_states_fh", "_flog_fh"):
            fh = getattr(self, name)
            setattr(self, name, None)
            if fh is not None:
                with contextlib.suppress(OSError):
                    fh.close()

    # --- meta -----------------------------------------------------------------------------
    def meta(self) -> RecordingMeta:
        ended = self.ended_ts or time.time()
        eff = 0.0
        if self.first_capture and self.last_capture and self.frames_written > 1:
            span = (self.last_capture[1] - self.first_capture[1]) / 1e9
            eff = (self.frames_written - 1) / span if span > 0 else 0.0
        anchor_wall, anchor_mono = self.first_capture or (self.started_ts, self.start_mono_ns)
        v = self.video
        status, reasons = self.status, list(self.reasons)
        # the exporter's rule on the frames written: a recording it would refuse is not ok
        stalled = stall_problem(self.capture_ts)
        if stalled is not None:
            if _SEVERITY["stalled"] > _SEVERITY[status]:
                status = "stalled"
            reasons.append(stalled)
        return RecordingMeta(
            run_stem=self.run_stem,
            started_ts=self.started_ts,
            ended_ts=ended,
            elapsed_sec=round(ended - self.started_ts, 6),
            frames_captured=self.frames_captured,
            frames_written=self.frames_written,
            effective_fps=round(eff, 4),
            container_fps=self.settings.video.container_fps,
            width=v.width,
            height=v.height,
            codec=v.codec_name,
            status=status,  # type: ignore[arg-type]
            recording_path=self.rel_path,
            status_reason="; ".join(reasons),
            pix_fmt=self.settings.video.pix_fmt,
            gop=v.gop,
            time_base=f"1/{self.settings.video.time_base_hz}",
            anchor_wall_ts=anchor_wall,
            anchor_mono_ns=anchor_mono,
            frames_dropped=self.frames_dropped,
            camera_frozen=self.camera_frozen,
            frozen_sec=round(self.frozen_sec, 3),
            camera_lost_count=self.camera_lost_count,
            camera_source=self.camera_spec,
            states_rows=self.states_rows,
            frame_requests=self.frame_requests,
            events_refused=dict(self.events_refused),
            first_capture_ts=self.first_capture[0] if self.first_capture else None,
            last_capture_ts=self.last_capture[0] if self.last_capture else None,
        )

    def write_meta(self) -> RecordingMeta:
        """Write recording_meta.json atomically (tmp + rename). Raises OSError."""
        meta = self.meta()
        path = self.files.meta
        atomic_write_json(path, meta.model_dump(mode="json"))
        path.chmod(0o644)  # mkstemp made it 0600; the exporter may run as another user
        return meta
