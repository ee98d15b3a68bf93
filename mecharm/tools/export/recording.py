"""Read one trial's recording (docs/recorder.md) and refuse it, with the reason, when it is not whole.

A recording is exported only when its four files agree: ``recording_meta.json``
exists (no meta = the recorder ended abnormally), ``frame_log.csv`` has one row per
frame with contiguous ``frame_idx`` and non-decreasing capture times, the meta's
``frames_written`` and the video's packet count both equal that row count, and
``states.csv`` carries the measured joint readings the state is built from.

A crashed recording (meta status ``crashed``: the recorder died and the repair wrote
the meta, docs/recorder.md "Crashed recordings") is read only when asked
(``allow_crashed``): its frame log was cut to the frames that decode, the mp4 may hold
undecodable packets after them (only the first ``frames_written`` are used), and a
``states.csv`` row cut by the kill at the very end is skipped.

The top camera's recording (``top_camera.mkv`` and ``top_frame_log.csv`` in the run
folder, written by the runtime) is read by ``load_top_recording`` with the same rules:
see docs/lerobot-top-camera.md.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import av
import numpy as np
from numpy.typing import NDArray

from mecharm.cameras.factory import is_synthetic
from mecharm.cameras.jpeg import jpeg_size
from mecharm.common.layout import DEFAULT_TASK, FRAME_LOG, META, STATES, VIDEO, DataRoot
from mecharm.recorder.events import (
    FRAME_LOG_COLUMNS,
    STATES_COLUMNS,
    EventError,
    RecordingMeta,
    parse_recording_meta,
)

__all__ = [
    "FRAME_LOG_NAME",
    "META_NAME",
    "SOURCE_NAMES",
    "STATES_NAME",
    "VIDEO_NAME",
    "Recording",
    "RecordingError",
    "TopRecording",
    "load_recording",
    "load_top_recording",
    "parse_gripper",
    "source_checksums",
]

# the recording folder's file names (docs/data-root.md)
VIDEO_NAME = VIDEO
FRAME_LOG_NAME = FRAME_LOG
STATES_NAME = STATES
META_NAME = META
#: the files that are one recording: their checksums identify it (``Recording.checksums``)
SOURCE_NAMES = (VIDEO_NAME, FRAME_LOG_NAME, STATES_NAME, META_NAME)
_JOINTS = ("j0", "j1", "j2", "j3", "j4", "j5")


#: the rows state and action are built from, read in the order written (never re-sorted)
_ACTION_AND_STATE = ("measured", "commanded", "gripper")


class RecordingError(ValueError):
    """The recording cannot be exported; the message names the file and what is wrong."""


@dataclass
class Recording:
    """A validated recording: capture times, joint readings, commands and gripper events."""

    run_stem: str
    path: Path
    meta: RecordingMeta
    frame_ts: NDArray[np.float64]  # wall seconds, one per video frame, non-decreasing
    measured_ts: NDArray[np.float64]
    measured: NDArray[np.float64]  # (M, 6) degrees
    commanded_ts: NDArray[np.float64]
    commanded: NDArray[np.float64]  # (C, 6) degrees
    gripper_ts: NDArray[np.float64]
    gripper: NDArray[np.float64]  # SDK units
    width: int
    height: int
    ignored_rows: dict[str, int] = field(default_factory=dict)

    @property
    def crashed(self) -> bool:
        """The recorder died: frames after ``frame_ts`` in the mp4 are not to be decoded."""
        return self.meta.status == "crashed"

    @property
    def video_path(self) -> Path:
        return self.path / VIDEO_NAME

    @property
    def duration_s(self) -> float:
        return float(self.frame_ts[-1] - self.frame_ts[0]) if len(self.frame_ts) else 0.0

    def checksums(self) -> dict[str, str]:
        """sha256 of the four source files, kept in the export manifest as provenance."""
        return {name: _sha256(self.path / name) for name in SOURCE_NAMES}


def source_checksums(path: Path) -> dict[str, str] | None:
    """``Recording.checksums`` of the recording folder ``path`` without reading it as a
    recording (None when a file is missing or unreadable: loading it will say why). The
    export compares them with its episodes' to know a trial it already holds."""
    try:
        return {name: _sha256(Path(path) / name) for name in SOURCE_NAMES}
    except OSError:
        return None


def parse_gripper(value: str) -> float:
    """The gripper value that was sent (SDK units 0..100), as the recorder wrote it.

    A word (``open``/``close``) is refused: recordings made before the gripper row
    carried the value sent cannot say which number the arm got.
    """
    v = value.strip()
    try:
        num = float(v)
    except ValueError:
        raise ValueError(
            f"gripper_state {value[:40]!r} is not the gripper value sent (a number 0..100); "
            "recordings that wrote words here predate that contract: re-record them"
        ) from None
    if not (math.isfinite(num) and 0.0 <= num <= 100.0):
        raise ValueError(f"gripper_state {value[:40]!r} is outside 0..100")
    return num


def _float(cell: str | None, what: str) -> float:
    try:
        num = float(cell) if cell is not None else math.nan
    except ValueError:
        raise ValueError(f"{what} {str(cell)[:40]!r} is not a number") from None
    if not math.isfinite(num):
        raise ValueError(f"{what} {str(cell)[:40]!r} is not a finite number")
    return num


def _read_meta(path: Path, run_stem: str) -> RecordingMeta:
    meta_path = path / META_NAME
    if not meta_path.is_file():
        raise RecordingError(
            f"{META_NAME} is missing: the recording ended abnormally (recorder killed or crashed); "
            f"`mecharm recording repair {run_stem}` accounts for it (then --include-crashed)"
        )
    try:
        meta = parse_recording_meta(meta_path.read_bytes())
    except OSError as exc:
        raise RecordingError(f"{META_NAME} is unreadable: {exc.strerror or exc}") from None
    except EventError as exc:
        raise RecordingError(f"{META_NAME} is invalid: {exc}") from None
    if meta.run_stem != run_stem:
        raise RecordingError(f"{META_NAME} belongs to {meta.run_stem!r}, not {run_stem!r}")
    return meta


def _csv_rows(path: Path, cut_tail: bool = False) -> list[tuple[int, list[str]]]:
    """(line number, cells) of every record of a csv file, header first.

    Bad bytes (not UTF-8) and csv faults (a field over the csv module's size limit, a
    NUL) become a RecordingError naming the file and the line, so the one trial is
    refused and the others still export. ``cut_tail`` drops a last line without its
    newline (a row a kill cut mid-write)."""
    name = path.name
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RecordingError(f"{name}: cannot read: {exc.strerror or exc}") from None
    if cut_tail and data and not data.endswith(b"\n"):
        data = data[: data.rfind(b"\n") + 1]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        lineno = data.count(b"\n", 0, exc.start) + 1
        raise RecordingError(
            f"{name} line {lineno}: byte {data[exc.start]:#04x} is not UTF-8 text "
            "(the file is damaged: re-record the trial or leave it out)"
        ) from None
    reader = csv.reader(io.StringIO(text, newline=""))
    out: list[tuple[int, list[str]]] = []
    try:
        for rec in reader:
            out.append((reader.line_num, rec))
    except csv.Error as exc:
        raise RecordingError(
            f"{name} line {reader.line_num}: not readable as csv: {exc} "
            "(the file is damaged: re-record the trial or leave it out)"
        ) from None
    return out


def _read_frame_log(log_path: Path) -> NDArray[np.float64]:
    """Capture times of a frame log (``frame_idx,capture_ts,...``): the side camera's or the top's."""
    name = log_path.name
    records = _csv_rows(log_path)
    header = records[0][1] if records else None
    if header is None or header[:2] != list(FRAME_LOG_COLUMNS[:2]):
        raise RecordingError(
            f"{name}: header {header} does not start with {list(FRAME_LOG_COLUMNS[:2])}"
        )
    ts: list[float] = []
    for lineno, rec in records[1:]:
        if not rec:
            continue
        try:
            if len(rec) < 2:
                raise ValueError(f"{len(rec)} cells")
            idx = int(rec[0])
            t = _float(rec[1], "capture_ts")
        except ValueError as exc:
            raise RecordingError(f"{name} line {lineno}: {exc}") from None
        if idx != len(ts):
            raise RecordingError(
                f"{name} line {lineno}: frame_idx {idx}, expected {len(ts)} (not contiguous)"
            )
        if ts and t < ts[-1]:
            raise RecordingError(
                f"{name} line {lineno}: capture_ts {t} goes back in time (previous {ts[-1]})"
            )
        ts.append(t)
    return np.asarray(ts, dtype=np.float64)


def _video_info(path: Path, cut_tail: bool = False) -> tuple[int, int, int]:
    """(packets, width, height) of the video stream; counting packets needs no decoding.

    ``cut_tail`` (crashed recordings): a read error after the first packets ends the
    count instead of refusing (the kill cut the last fragment)."""
    video = path / VIDEO_NAME
    if not video.is_file():
        raise RecordingError(f"{VIDEO_NAME} is missing")
    packets = 0
    try:
        with av.open(str(video)) as container:
            if not container.streams.video:
                raise RecordingError(f"{VIDEO_NAME} has no video stream")
            stream = container.streams.video[0]
            width, height = stream.codec_context.width, stream.codec_context.height
            try:
                for p in container.demux(stream):
                    packets += 1 if p.size else 0
            except av.error.FFmpegError:
                if not (cut_tail and packets):
                    raise
    except av.error.FFmpegError as exc:
        raise RecordingError(f"{VIDEO_NAME} is unreadable: {exc}") from None
    return packets, width, height


def _read_states(
    path: Path, cut_tail: bool = False
) -> tuple[dict[str, list[tuple[float, ...]]], dict[str, int]]:
    """The joint and gripper rows; ``cut_tail`` (crashed recordings) skips a last line
    without its newline: a row the kill cut mid-write."""
    records = _csv_rows(path / STATES_NAME, cut_tail)
    rows: dict[str, list[tuple[float, ...]]] = {"measured": [], "commanded": [], "gripper": []}
    ignored: dict[str, int] = {}
    last_ts = -math.inf
    header = records[0][1] if records else None
    if header != list(STATES_COLUMNS):
        raise RecordingError(f"{STATES_NAME}: header {header} is not {list(STATES_COLUMNS)}")
    col = {name: i for i, name in enumerate(header)}
    for lineno, rec in records[1:]:
        if not rec:
            continue
        if len(rec) != len(header):
            raise RecordingError(
                f"{STATES_NAME} line {lineno}: {len(rec)} cells, header has {len(header)}"
            )
        etype = rec[col["event_type"]]
        try:
            ts = _float(rec[col["ts"]], "ts")
            if etype in _ACTION_AND_STATE:
                # the runtime sends these on one socket in the order they happen
                if ts < last_ts:
                    raise ValueError(
                        f"ts {ts} goes back in time (previous joint/gripper row {last_ts}): "
                        "rows must be in time order"
                    )
                last_ts = ts
            if etype in ("measured", "commanded"):
                angles = tuple(_float(rec[col[j]], f"{etype} {j}") for j in _JOINTS)
                rows[etype].append((ts, *angles))
            elif etype == "gripper":
                rows["gripper"].append((ts, parse_gripper(rec[col["gripper_state"]])))
            else:
                ignored[etype] = ignored.get(etype, 0) + 1
        except ValueError as exc:
            raise RecordingError(f"{STATES_NAME} line {lineno}: {exc}") from None
    return rows, ignored


def _columns(
    rows: list[tuple[float, ...]], width: int
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(times, values) of rows already in time order (``_read_states`` refuses any other)."""
    arr = np.asarray(rows, dtype=np.float64).reshape(-1, width + 1)
    return arr[:, 0].copy(), arr[:, 1:].copy()


def load_recording(
    path: Path, run_stem: str, *, allow_crashed: bool = False, allow_synthetic: bool = False
) -> Recording:
    """Read and cross-check the recording in ``path``; raise RecordingError naming the fault.

    A crashed recording is refused unless ``allow_crashed``; one of a generated test card
    (``--camera synthetic``) unless ``allow_synthetic``: it is no demonstration."""
    path = Path(path)
    if not path.is_dir():
        raise RecordingError(f"recording folder {path} does not exist")
    meta = _read_meta(path, run_stem)
    if is_synthetic(meta.camera_source) and not allow_synthetic:
        raise RecordingError(
            f"the side video is a synthetic test card (camera {meta.camera_source!r}), not "
            "the camera: --allow-synthetic exports it anyway (tests, a demo)"
        )
    crashed = meta.status == "crashed"
    if crashed and not allow_crashed:
        raise RecordingError(
            f"crashed recording (the recorder died; {meta.frames_written} frames decodable, "
            f"{meta.seconds_lost or 0:.3f} s lost): --include-crashed exports its decodable part"
        )
    frame_ts = _read_frame_log(path / FRAME_LOG_NAME)
    n = len(frame_ts)
    if meta.frames_written != n:
        raise RecordingError(
            f"{FRAME_LOG_NAME} has {n} frames but {META_NAME} says frames_written={meta.frames_written}"
        )
    packets, width, height = _video_info(path, cut_tail=crashed)
    # crashed: packets after the decodable ones are what the kill cut; they are never decoded
    if packets != n and not (crashed and packets > n):
        raise RecordingError(f"{VIDEO_NAME} holds {packets} frames but {FRAME_LOG_NAME} lists {n}")
    if n < 2:
        raise RecordingError(f"only {n} frame(s) recorded; an episode needs at least 2")
    rows, ignored = _read_states(path, cut_tail=crashed)
    if not rows["measured"]:
        raise RecordingError(
            f"{STATES_NAME} has no measured joint rows: observation.state cannot be built"
        )
    m_ts, measured = _columns(rows["measured"], 6)
    c_ts, commanded = _columns(rows["commanded"], 6)
    g_ts, grip = _columns(rows["gripper"], 1)
    return Recording(
        run_stem=run_stem,
        path=path,
        meta=meta,
        frame_ts=frame_ts,
        measured_ts=m_ts,
        measured=measured,
        commanded_ts=c_ts,
        commanded=commanded,
        gripper_ts=g_ts,
        gripper=grip[:, 0].copy(),
        width=width,
        height=height,
        ignored_rows=ignored,
    )


# ------------------------------------------------------------------ the top camera

_NO_TOP = (
    "the runtime records the top camera while its setting top_video is on; export this "
    "trial into a side-only dataset (--cameras side) instead"
)


@dataclass
class TopRecording:
    """The top camera's validated recording: one capture time per MJPEG packet."""

    video_path: Path
    frame_log_path: Path
    frame_ts: NDArray[np.float64]  # wall seconds, same clock as the side frame log
    width: int
    height: int

    def checksums(self) -> dict[str, str]:
        """sha256 of the two files, next to the side recording's in the export manifest."""
        return {p.name: _sha256(p) for p in (self.video_path, self.frame_log_path)}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _top_packets(video: Path) -> tuple[int, int, int]:
    """(frames, width, height) of an MJPEG Matroska file; each packet must be a whole JPEG of
    the same size (a camera that changed mode mid-trial cannot become one video)."""
    frames = 0
    size: tuple[int, int] | None = None
    try:
        with av.open(str(video)) as container:
            if not container.streams.video:
                raise RecordingError(f"{video.name} has no video stream")
            stream = container.streams.video[0]
            if stream.codec_context.name != "mjpeg":
                raise RecordingError(
                    f"{video.name} holds {stream.codec_context.name}, expected MJPEG packets "
                    "as the camera delivered them"
                )
            for packet in container.demux(stream):
                if not packet.size:
                    continue
                got = jpeg_size(bytes(packet), whole=True)
                if got is None:
                    raise RecordingError(f"{video.name} frame {frames} is not a whole JPEG image")
                if size is None:
                    size = got
                elif got != size:
                    raise RecordingError(
                        f"{video.name} frame {frames} is {got[0]}x{got[1]}, frame 0 is "
                        f"{size[0]}x{size[1]}: the top camera changed its size mid-trial"
                    )
                frames += 1
    except av.error.FFmpegError as exc:
        raise RecordingError(f"{video.name} is unreadable: {exc}") from None
    if size is None:
        raise RecordingError(f"{video.name} holds no frame; {_NO_TOP}")
    return frames, size[0], size[1]


def _runlog_top(root: Path, run_stem: str, task: str) -> str:
    """What the run log says about the top recording (``top_video``), for a refusal's reason."""
    try:
        runlog = DataRoot(root, task).runlog(run_stem)
        entry = json.loads(runlog.read_text(encoding="utf-8"))["top_video"]
        status, reason = str(entry.get("status", "")), str(entry.get("reason", ""))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return ""
    return f" (the run log says top_video {status}{': ' + reason if reason else ''})"


def load_top_recording(root: Path, run_stem: str, task: str = DEFAULT_TASK) -> TopRecording:
    """Read and cross-check the top camera's recording of ``run_stem`` (a trial of ``task``)
    under the data root ``root``; raise RecordingError naming what is missing or wrong and
    what to do."""
    files = DataRoot(root, task)
    video, log_path = files.top_video(run_stem), files.top_frame_log(run_stem)
    missing = [p.name for p in (video, log_path) if not p.is_file()]
    if missing:
        raise RecordingError(
            f"no top camera recording: {' and '.join(missing)} missing in the run folder"
            f"{_runlog_top(root, run_stem, task)}; {_NO_TOP}"
        )
    frame_ts = _read_frame_log(log_path)
    frames, width, height = _top_packets(video)
    if frames != len(frame_ts):
        raise RecordingError(
            f"{video.name} holds {frames} frames but {log_path.name} lists {len(frame_ts)}"
            f"{_runlog_top(root, run_stem, task)}"
        )
    if frames < 2:
        raise RecordingError(f"{video.name} holds only {frames} frame; {_NO_TOP}")
    return TopRecording(video, log_path, frame_ts, width, height)
