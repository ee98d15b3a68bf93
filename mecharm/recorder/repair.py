"""Account for a recording whose recorder died: reconcile it and write its meta (status ``crashed``).

A recorder killed mid-trial leaves ``episode.mp4`` (fragmented: every fragment closed
before the kill decodes), ``frame_log.csv``, ``states.csv`` and no meta. The repair
(docs/recorder.md, "Crashed recordings"):

1. takes the folder's lock — a live recorder holds it until the meta is written, so a
   recording still being written is refused, never touched;
2. cuts a fragment header the kill left half-written at the end of the mp4 (FFmpeg
   cannot open a file that ends in one; it holds no frame), then decodes the mp4 with
   PyAV and counts the frames that decode, in order, up to the first packet the kill
   cut (``frames_decodable``);
3. keeps that many ``frame_log.csv`` rows, byte for byte, and cuts the rest; the file as
   the recorder left it is kept as ``frame_log.before_repair.csv`` (never overwritten);
4. leaves ``states.csv`` as it is: the joint data is valid without video;
5. writes ``recording_meta.json`` atomically: status ``crashed``, ``frames_decodable``,
   ``seconds_lost`` (capture time from the last decodable frame to the last frame the
   recorder logged) and a note in ``status_reason``.

Idempotent: a folder whose meta says anything but ``crashed`` is complete and left
alone; a crashed one whose frame log already matches its meta is left alone too.
Runs at recorder start-up (``RepairScan``, for every recording left without a meta)
and as ``mecharm recording repair``.

One concern: accounting for crashed recordings, the numbered steps above, each a short
function, with the lookups (``find_recording``, ``unrepaired_recordings``) and the scan
(``RepairScan``) that call them.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Final

import av

from mecharm.common.dirlock import DirBusyError, lock_dir, unlock_dir
from mecharm.common.fsutil import (
    OutsideRootError,
    UnsafeNameError,
    atomic_write_bytes,
    atomic_write_json,
    inside_root,
    validate_name,
)
from mecharm.common.layout import (
    DEFAULT_TASK,
    FRAME_LOG,
    META,
    RECORDING,
    RUN_FOLDER_PREFIX,
    STATES,
    TASK_NAME_RE,
    VIDEO,
    DataRoot,
    RecordingFiles,
)
from mecharm.common.logging import get_logger
from mecharm.recorder.events import (
    FRAME_LOG_COLUMNS,
    EventError,
    RecordingMeta,
    parse_recording_meta,
)

__all__ = [
    "RecordingBusyError",
    "RepairError",
    "RepairResult",
    "RepairScan",
    "VideoProbe",
    "find_recording",
    "probe_video",
    "repair_recording",
    "unrepaired_recordings",
]

log = get_logger("mecharm.recorder.repair")

#: the status the repair writes (mecharm.recorder.events.RECORDING_STATUSES)
CRASHED: Final = "crashed"
#: Linux nice value of the start-up scan's thread: decoding old recordings must not
#: take CPU from the camera and the encoder of a trial being recorded
SCAN_NICE = 10


class RepairError(ValueError):
    """The folder is refused (not a recording, outside the root, busy, bad meta); says why."""


class RecordingBusyError(RepairError):
    """A live recorder (or another repair) holds the folder: it is not touched."""


@dataclass(frozen=True)
class VideoProbe:
    """What an mp4 left by a killed recorder really holds."""

    frames: int = 0
    width: int = 0
    height: int = 0
    codec: str = ""
    pix_fmt: str = "yuv420p"
    time_base: str = ""
    rate: float = 0.0
    #: decode time of each decodable frame, seconds from the first (PTS x time base)
    pts_s: tuple[float, ...] = ()
    problem: str = ""


@dataclass(frozen=True)
class RepairResult:
    run_stem: str
    path: Path
    #: ``repaired``, ``already`` (crashed, frame log matches the meta) or ``complete`` (meta not crashed)
    action: str
    meta: RecordingMeta | None
    note: str


def _box_ends(data: bytes) -> tuple[list[tuple[bytes, int]], bool]:
    """(type, end offset) of the complete top-level boxes, and whether the last box left
    is an mdat whose header is whole (its complete samples still decode)."""
    boxes: list[tuple[bytes, int]] = []
    pos = 0
    while pos < len(data):
        if pos + 8 > len(data):
            return boxes, False
        size, kind = struct.unpack(">I4s", data[pos : pos + 8])
        head = 8
        if size == 1:  # 64-bit size follows
            if pos + 16 > len(data):
                return boxes, False
            size, head = struct.unpack(">Q", data[pos + 8 : pos + 16])[0], 16
        elif size == 0:  # runs to the end of the file
            size = len(data) - pos
        if size < head:
            return boxes, False
        if pos + size > len(data):
            return boxes, kind == b"mdat"
        pos += size
        boxes.append((kind, pos))
    return boxes, False


def cut_partial_header(path: Path) -> int:
    """Cut a fragment header (moof) the kill left half-written at the end of the mp4;
    returns the bytes cut (0 when the file ends cleanly or inside a fragment's data).

    FFmpeg reads every fragment header when it opens a file, so one cut short makes the
    whole file unreadable; it holds no frame (its data never started). A fragment whose
    data (mdat) was cut is kept: its complete frames decode.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    boxes, in_mdat = _box_ends(data)
    if in_mdat or not boxes or boxes[-1][1] == len(data):
        return 0
    if boxes[-1][0] == b"moof":  # its mdat never started: the fragment holds nothing
        boxes.pop()
    end = boxes[-1][1] if boxes else 0
    os.truncate(path, end)
    return len(data) - end


def probe_video(path: Path) -> VideoProbe:
    """Decode ``path`` packet by packet and count the frames that decode, stopping at the
    first packet the demuxer marks cut (``is_corrupt``) or the decoder refuses."""
    if not path.is_file():
        return VideoProbe(problem=f"{VIDEO} is missing")
    pts: list[float] = []
    problem = ""
    try:
        container = av.open(str(path))
    except av.error.FFmpegError as exc:
        return VideoProbe(problem=f"{VIDEO} cannot be opened: {exc}")
    with container:
        if not container.streams.video:
            return VideoProbe(problem=f"{VIDEO} has no video stream")
        stream = container.streams.video[0]
        cc = stream.codec_context
        cc.thread_type = "SLICE"  # no frame threading: a frame comes out per packet, in order
        tb = stream.time_base or Fraction(1, 90_000)
        first: int | None = None

        def take(frames: list[av.VideoFrame]) -> None:
            nonlocal first
            for f in frames:
                p = f.pts if f.pts is not None else 0
                first = p if first is None else first
                pts.append(float((p - first) * tb))

        try:
            for packet in container.demux(stream):
                if not packet.size:
                    continue
                if packet.is_corrupt:
                    problem = "the last fragment was cut by the kill"
                    break
                try:
                    take(stream.decode(packet))
                except av.error.FFmpegError as exc:
                    problem = f"decoding stopped at packet {packet.pos}: {exc}"
                    break
        except av.error.FFmpegError as exc:
            problem = f"reading stopped: {exc}"
        with contextlib.suppress(av.error.FFmpegError):
            take(stream.decode(None))
        rate = stream.average_rate or stream.base_rate or 0
        return VideoProbe(
            frames=len(pts),
            width=cc.width,
            height=cc.height,
            codec=cc.name,
            pix_fmt=cc.pix_fmt or "yuv420p",
            time_base=f"{tb.numerator}/{tb.denominator}",
            rate=float(rate),
            pts_s=tuple(pts),
            problem=problem,
        )


# --------------------------------------------------------------------------- finding folders


def _task_of(rec_dir: Path) -> str:
    """The task whose folder holds the recording folder ``rec_dir``
    (``runs/run_<task>/<stem>/recording``); the first task when the path says none."""
    folder = rec_dir.parent.parent.name
    task = folder[len(RUN_FOLDER_PREFIX) :] if folder.startswith(RUN_FOLDER_PREFIX) else ""
    return task if TASK_NAME_RE.fullmatch(task) else DEFAULT_TASK


def find_recording(root: Path, target: str) -> Path:
    """The recording folder meant by ``target``: a run stem (of any task), a run folder or a
    recording folder, inside ``root``. Raises RepairError saying why anything else is refused."""
    root = Path(root)
    if not root.is_dir():
        raise RepairError(f"data root {root} is not a folder")
    layout = DataRoot(root.resolve())
    folders = layout.task_folders()
    where = " or ".join(str(f) for f in folders) or str(layout.run_folders)
    if "/" not in target and os.sep not in target and target not in (".", ".."):
        try:
            stem = validate_name(target, "run stem")
        except UnsafeNameError as exc:
            raise RepairError(str(exc)) from None
        found = [f / stem / RECORDING for f in folders if (f / stem).is_dir()]
        if not found:
            raise RepairError(f"no run {stem} in {where}")
        path = found[0]
    else:
        try:
            path = inside_root(layout.root, Path(target))
        except OutsideRootError as exc:
            raise RepairError(str(exc)) from None
        if path.name != RECORDING and (path / RECORDING).is_dir():
            path = path / RECORDING
        if path.name != RECORDING or path.parent.parent not in folders:
            raise RepairError(
                f"{target} is not a recording folder ({where}: RUN_STEM or RUN_STEM/{RECORDING})"
            )
    if not path.is_dir():
        raise RepairError(f"{path} does not exist: the run has no recording")
    files = RecordingFiles(path)
    if not any(p.is_file() for p in (files.video, files.frame_log, files.states, files.meta)):
        raise RepairError(f"{path} holds none of {VIDEO}, {FRAME_LOG}, {STATES}: not a recording")
    return path


def unrepaired_recordings(root: Path) -> list[Path]:
    """Recording folders under ``root`` (every task's) without a meta but with media or
    logs, by task and name."""
    out = []
    for folder in DataRoot(root).task_folders():
        try:
            runs = sorted(folder.iterdir())
        except OSError:
            continue
        for run in runs:
            try:
                files = RecordingFiles(folder / validate_name(run.name, "run stem") / RECORDING)
            except UnsafeNameError:
                continue
            if files.meta.exists() or not files.dir.is_dir():
                continue
            if any(p.is_file() for p in (files.video, files.frame_log, files.states)):
                out.append(files.dir)
    return out


# --------------------------------------------------------------------------- reading the logs


@dataclass
class _FrameLog:
    header: bytes = b""
    #: complete, well-formed rows: (raw line, capture_ts, capture_mono_ns)
    rows: list[tuple[bytes, float, int]] | None = None
    bad_tail: int = 0  # lines after the last good row (partial or malformed)

    @property
    def n(self) -> int:
        return len(self.rows or [])


def _read_frame_log(path: Path) -> _FrameLog:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return _FrameLog(rows=[])
    lines = data.splitlines(keepends=True)
    want = ",".join(FRAME_LOG_COLUMNS).encode()
    if not lines or lines[0].rstrip(b"\r\n") != want:
        return _FrameLog(rows=[], bad_tail=len(lines))
    out = _FrameLog(header=lines[0], rows=[])
    assert out.rows is not None
    for k, line in enumerate(lines[1:]):
        try:
            if not line.endswith(b"\n"):
                raise ValueError("partial line")
            idx, ts, mono = line.decode().strip().split(",")
            t = float(ts)
            if int(idx) != k or not math.isfinite(t):
                raise ValueError("bad row")
            out.rows.append((line, t, int(mono)))
        except ValueError:
            out.bad_tail = len(lines) - 1 - k
            break
    return out


@dataclass
class _States:
    rows: int = 0
    frame_requests: int = 0
    first_ts: float | None = None
    last_ts: float | None = None
    partial_tail: bool = False


def _read_states(path: Path) -> _States:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return _States()
    st = _States(partial_tail=bool(text) and not text.endswith("\n"))
    if st.partial_tail:
        text = text[: text.rfind("\n") + 1]
    reader = csv.reader(io.StringIO(text, newline=""))
    next(reader, None)
    for rec in reader:
        if not rec:
            continue
        st.rows += 1
        if len(rec) > 1 and rec[1] == "frame_request":
            st.frame_requests += 1
        try:
            ts = float(rec[0])
        except (ValueError, IndexError):
            continue
        if math.isfinite(ts):
            st.first_ts = ts if st.first_ts is None else st.first_ts
            st.last_ts = ts
    return st


# --------------------------------------------------------------------------- the repair


def repair_recording(
    root: Path, rec_dir: Path, *, by: str, now: Callable[[], float] = time.time
) -> RepairResult:
    """Repair one recording folder (see the module docstring). Raises RepairError when the
    folder is busy or its meta is invalid, OSError when it cannot be written."""
    rec_dir = Path(rec_dir)
    stem = rec_dir.parent.name
    rel = str(DataRoot.recording_rel(stem, _task_of(rec_dir)))
    try:  # a run folder symlinked out of the root is never written through (by name, --all, scan)
        inside_root(root, rec_dir)
    except OutsideRootError as exc:
        raise RepairError(f"{rel}: {exc}; not touched") from None
    files = RecordingFiles(rec_dir)
    try:
        fd = lock_dir(rec_dir)
    except DirBusyError:
        raise RecordingBusyError(
            f"{rel}: held by a live recorder (still writing it) or another repair; not touched"
        ) from None
    try:
        if files.meta.exists():
            try:
                meta = parse_recording_meta(files.meta.read_bytes())
            except EventError as exc:
                raise RepairError(f"{rel}: {META} is invalid ({exc}); not touched") from None
            if meta.status != CRASHED:
                return RepairResult(
                    stem, rec_dir, "complete", meta, f"complete (status {meta.status})"
                )
            if _read_frame_log(files.frame_log).n == meta.frames_written:
                return RepairResult(stem, rec_dir, "already", meta, "already repaired")
        meta = _repair(root, rec_dir, stem, rel, files, by, now())
        return RepairResult(stem, rec_dir, "repaired", meta, meta.status_reason)
    finally:
        unlock_dir(fd)


def _repair(
    root: Path, rec_dir: Path, stem: str, rel: str, files: RecordingFiles, by: str, at: float
) -> RecordingMeta:
    current = _read_frame_log(files.frame_log)
    aside = files.frame_log_before_repair
    # an earlier repair that was interrupted already cut rows: the original is the one aside
    original = _read_frame_log(aside) if aside.is_file() else current
    cut_bytes = cut_partial_header(files.video)
    video = probe_video(files.video)
    rows = current.rows or []
    kept = min(len(rows), video.frames)
    new = (current.header or ",".join(FRAME_LOG_COLUMNS).encode() + b"\n") + b"".join(
        line for line, _t, _m in rows[:kept]
    )
    old = files.frame_log.read_bytes() if files.frame_log.is_file() else None
    if new != old:
        if old is not None and not aside.exists():
            atomic_write_bytes(aside, old)
            aside.chmod(0o644)
        atomic_write_bytes(files.frame_log, new)
        files.frame_log.chmod(0o644)
    orig_rows = original.rows or []
    removed = max(0, len(orig_rows) - kept)
    last_logged = orig_rows[-1][1] if orig_rows else None
    if kept:
        lost = (last_logged or rows[kept - 1][1]) - rows[kept - 1][1]
    elif orig_rows:
        lost = orig_rows[-1][1] - orig_rows[0][1]
    else:
        lost = 0.0
    states = _read_states(files.states)
    first = rows[0] if rows else None
    last = rows[kept - 1] if kept else None
    started = states.first_ts or (first[1] if first else rec_dir.stat().st_mtime)
    ended = max(x for x in (started, states.last_ts, last_logged) if x is not None)
    eff = 0.0
    if first and last and kept > 1 and last[2] > first[2]:
        eff = (kept - 1) / ((last[2] - first[2]) / 1e9)
    notes = [
        "the recorder ended without writing its meta (killed, crashed or its disk lost)",
        f"repaired by {by} at {time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(at))}",
        f"{kept} of {len(orig_rows)} logged frames decode, {lost:.3f} s of logged video lost",
    ]
    if removed:
        notes.append(f"{removed} {FRAME_LOG} rows beyond them cut (original: {aside.name})")
    if original.bad_tail:
        notes.append(f"{original.bad_tail} partial or malformed {FRAME_LOG} line(s) dropped")
    if video.frames > len(rows):
        notes.append(
            f"{VIDEO} decodes to {video.frames - len(rows)} frame(s) more than {FRAME_LOG} "
            "lists: without capture times they are not used"
        )
    if cut_bytes:
        notes.append(
            f"{cut_bytes} bytes of a fragment header the kill cut short removed from {VIDEO}"
        )
    if video.problem:
        notes.append(video.problem)
    if states.partial_tail:
        notes.append(f"{STATES} ends in a row cut by the kill (readers skip it)")
    meta = RecordingMeta(
        run_stem=stem,
        started_ts=started,
        ended_ts=ended,
        elapsed_sec=round(ended - started, 6),
        frames_captured=len(orig_rows),
        frames_written=kept,
        effective_fps=round(eff, 4),
        container_fps=round(video.rate, 4),
        width=video.width,
        height=video.height,
        codec=video.codec or "h264",
        status=CRASHED,
        recording_path=rel,
        status_reason="; ".join(notes),
        pix_fmt=video.pix_fmt,
        time_base=video.time_base or "1/90000",
        anchor_wall_ts=first[1] if first else 0.0,
        anchor_mono_ns=first[2] if first else 0,
        frames_dropped=removed,
        states_rows=states.rows,
        frame_requests=states.frame_requests,
        first_capture_ts=first[1] if first else None,
        last_capture_ts=last[1] if last else None,
        frames_decodable=video.frames,
        seconds_lost=round(lost, 6),
        frame_log_rows_removed=removed,
    )
    atomic_write_json(files.meta, meta.model_dump(mode="json"))
    files.meta.chmod(0o644)
    return meta


# --------------------------------------------------------------------------- at recorder start


class RepairScan:
    """The recorder's start-up pass: repairs ``folders`` (listed before the first event is
    served, so no trial of this run is among them) in a low-priority thread.

    A folder found busy is tried once more after ``retry_sec``: a runtime probing the
    lock, or another repair, holds it only for a moment. The recorder's own trials
    are never busy-waited on: they are not in the list.
    """

    def __init__(self, root: Path, folders: list[Path], retry_sec: float = 2.0) -> None:
        self.root = Path(root)
        self.folders = list(folders)
        self.retry_sec = retry_sec
        self.repaired: list[RepairResult] = []
        self.failed: list[tuple[Path, str]] = []
        self.done = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="repair-scan", daemon=True)

    def start(self) -> None:
        if self.folders:
            self._thread.start()
        else:
            self.done.set()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop between folders (each repair is atomic: an interrupted one is redone next time)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        if SCAN_NICE > 0 and sys.platform.startswith("linux"):
            try:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), SCAN_NICE)
            except OSError as exc:
                log.warning("repair_nice_failed", nice=SCAN_NICE, error=str(exc))
        try:
            busy = self._pass(self.folders)
            if busy and not self._stop.wait(self.retry_sec):
                for path in self._pass(busy):
                    self.failed.append((path, "busy"))
            log.info(
                "repair_scan_done",
                found=len(self.folders),
                repaired=len(self.repaired),
                failed=len(self.failed),
            )
        finally:
            self.done.set()

    def _pass(self, folders: list[Path]) -> list[Path]:
        busy = []
        for path in folders:
            if self._stop.is_set():
                break
            try:
                res = repair_recording(self.root, path, by="recorder start-up")
            except RecordingBusyError:
                busy.append(path)
                continue
            except RepairError as exc:
                self.failed.append((path, str(exc)))
                log.error("recording_repair_failed", path=str(path), error=str(exc))
                continue
            except Exception as exc:  # one bad folder must not end the scan
                self.failed.append((path, f"{type(exc).__name__}: {exc}"))
                log.error(
                    "recording_repair_failed", path=str(path), error=f"{type(exc).__name__}: {exc}"
                )
                continue
            if res.action == "repaired" and res.meta is not None:
                self.repaired.append(res)
                log.warning(
                    "recording_repaired",
                    run_stem=res.run_stem,
                    status=res.meta.status,
                    frames_decodable=res.meta.frames_decodable,
                    rows_removed=res.meta.frame_log_rows_removed,
                    seconds_lost=res.meta.seconds_lost,
                )
        return busy
