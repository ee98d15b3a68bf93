"""Recordings in the recorder's exact on-disk format (docs/recorder.md), built for the export tests.

The video is written by the recorder's own ``VideoWriter`` (fragmented H.264 MP4,
PTS = capture times), the CSVs with the column lists of ``mecharm.recorder.events``, and
the ledger with the runtime's ``append_row``. Each frame carries its frame index as
a row of black/white 16-px blocks, so a test can read back which recorded frame a
dataset row shows.

The top camera's recording (``top_camera.mkv`` + ``top_frame_log.csv`` in the run
folder, docs/lerobot-top-camera.md) is written as the runtime writes it: the
camera's JPEGs (here ``cv2.imencode``) muxed by PyAV as MJPEG packets into
Matroska, one frame log row per packet, on the same wall clock as the side camera.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np
import pytest
import structlog

from mecharm.common.layout import FRAME_LOG, META, STATES, VIDEO, DataRoot
from mecharm.recorder.config import VideoSettings
from mecharm.recorder.events import FRAME_LOG_COLUMNS, STATES_COLUMNS
from mecharm.recorder.video import VideoWriter
from mecharm.runtime.records.ledger import append_row, ledger_path
from mecharm.runtime.records.runlog import build_runlog, write_runlog

W, H = 192, 96
#: the fixtures' top camera: another size and aspect than the side's (16:9 like the sim's)
TOP_W, TOP_H = 320, 180
#: its frame log's header (the runtime's, docs/lerobot-top-camera.md)
TOP_FRAME_LOG_COLUMNS = ("frame_idx", "capture_ts", "mono_ns")
BITS = 12
BLOCK = 16
T0 = 1_764_500_000.0  # a wall-clock start (2025-11-30)


def stamp(frame_idx: int, w: int = W, h: int = H) -> np.ndarray:
    """A BGR test image: bits of frame_idx as 16-px blocks on the top two rows, a gradient below."""
    img = np.zeros((h, w, 3), np.uint8)
    img[BLOCK * 2 :, :, 2] = np.linspace(0, 255, w, dtype=np.uint8)[None, :]
    img[BLOCK * 2 :, :, 1] = (frame_idx * 7) % 256
    for b in range(BITS):
        if (frame_idx >> b) & 1:
            r, c = divmod(b, W // BLOCK)
            img[r * BLOCK : (r + 1) * BLOCK, c * BLOCK : (c + 1) * BLOCK] = 255
    return img


def read_stamp(rgb: np.ndarray, block: float = BLOCK) -> int:
    """Frame index back from a decoded image (RGB or BGR: the blocks are grey); ``block``:
    the blocks' size in this image (smaller when the video was scaled down)."""
    value = 0
    m = max(1, round(block / 4))
    for b in range(BITS):
        r, c = divmod(b, W // BLOCK)
        y0, x0 = round(r * block), round(c * block)
        y1, x1 = round((r + 1) * block), round((c + 1) * block)
        if rgb[y0 + m : y1 - m, x0 + m : x1 - m].mean() > 128:
            value |= 1 << b
    return value


def top_capture_times(duration: float, seed: int, rate: float = 10.0) -> np.ndarray:
    """Top camera capture times: ~``rate`` fps with jitter, from 50 ms before the side
    camera's first frame to 100 ms after ``duration`` (the runtime records the whole trial)."""
    rng = np.random.default_rng(seed + 100)
    step = 1.0 / rate
    n = int((duration + 0.15) / step) + 1
    ts = -0.05 + np.arange(n) * step + rng.uniform(-0.2, 0.2, n) * step
    return np.maximum.accumulate(ts)


def write_top_recording(
    root: Path,
    run_stem: str,
    rel_ts: np.ndarray,
    wall0: float,
    *,
    sizes: list[tuple[int, int]] | None = None,
    log_rows: int | None = None,
) -> np.ndarray:
    """The runtime's top recording of one trial; returns the frames' wall capture times.

    ``sizes``: (width, height) of each frame (default all TOP_W x TOP_H); ``log_rows``:
    write only this many frame log rows (a log shorter than the video)."""
    files = DataRoot(root)
    files.run_dir(run_stem).mkdir(parents=True, exist_ok=True)
    wall = wall0 + np.asarray(rel_ts, dtype=np.float64)
    sizes = sizes or [(TOP_W, TOP_H)] * len(wall)
    tb = Fraction(1, 1000)
    with av.open(str(files.top_video(run_stem)), "w", format="matroska") as out:
        stream = out.add_stream("mjpeg", rate=10)
        stream.width, stream.height = sizes[0]
        stream.pix_fmt = "yuvj420p"
        stream.time_base = tb
        for i, t in enumerate(rel_ts):
            ok, jpg = cv2.imencode(".jpg", stamp(i, *sizes[i]), [cv2.IMWRITE_JPEG_QUALITY, 90])
            assert ok
            packet = av.Packet(jpg.tobytes())
            packet.stream = stream
            packet.time_base = tb
            packet.pts = packet.dts = round((t - rel_ts[0]) * 1000)
            out.mux(packet)
    with open(files.top_frame_log(run_stem), "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(TOP_FRAME_LOG_COLUMNS)
        for i in range(len(wall) if log_rows is None else log_rows):
            w.writerow([i, f"{wall[i]:.6f}", 5_000_000_000 + round(rel_ts[i] * 1e9)])
    return wall


def capture_times(duration: float, seed: int, gaps: int = 4) -> np.ndarray:
    """Irregular capture times ~26 fps (like the reference side camera, docs/recorder.md): jittered 36 ms steps and some ~92 ms gaps."""
    rng = np.random.default_rng(seed)
    dts = np.clip(rng.normal(0.0375, 0.004, size=int(duration * 40) + 10), 0.025, 0.05)
    for i in rng.choice(np.arange(5, len(dts) - 5), size=gaps, replace=False):
        dts[i] = 0.090 + 0.006 * rng.random()
    ts = np.concatenate([[0.0], np.cumsum(dts)])
    return ts[ts <= duration]


@dataclass
class Trial:
    """What the fixture wrote, so tests can compute expected values independently."""

    run_stem: str
    path: Path
    frame_ts: np.ndarray
    measured: list[tuple[float, list[float]]] = field(default_factory=list)
    commanded: list[tuple[float, list[float]]] = field(default_factory=list)
    gripper: list[tuple[float, str]] = field(default_factory=list)
    #: the top camera's capture times (empty: no top recording written)
    top_ts: np.ndarray = field(default_factory=lambda: np.zeros(0))


def _moves(t0: float, duration: float) -> list[tuple[float, float, list[float]]]:
    """(start, end, target) of a few moves, like a pick and place."""
    poses = [
        [0, 0, 0, 0, 0, -30],
        [-32, 87.7, -38.3, 18.6, -45.1, -30],
        [37, 66.6, 2.8, -1.4, -78, -29.5],
        [0, 0, 0, 0, 0, -30],
    ]
    out = []
    step = duration / (len(poses) + 1)
    for i, pose in enumerate(poses[1:], 1):
        start = t0 + i * step - step * 0.4
        out.append((start, start + step * 0.6, [float(a) for a in pose]))
    return out


def write_recording(
    root: Path,
    run_stem: str,
    *,
    duration: float = 6.0,
    seed: int = 0,
    status: str = "ok",
    write_meta: bool = True,
    drop_log_rows: int = 0,
    frame_log_extra: bool = False,
    top: bool = True,
) -> Trial:
    """One trial's side recording (and, with ``top``, the runtime's top recording)."""
    rec = DataRoot(root).recording(run_stem).dir
    rec.mkdir(parents=True)
    rel = ts_rel = np.asarray(capture_times(duration, seed))
    wall = T0 + seed * 1000 + rel
    writer = VideoWriter(rec / VIDEO, VideoSettings(preset="ultrafast", crf=18, gop_sec=1.0))
    anchor = 1_000_000_000_000
    for i, t in enumerate(ts_rel):
        writer.write(stamp(i), anchor + round(t * 1e9))
    writer.close()
    trial = Trial(run_stem, rec, wall)
    if top:
        trial.top_ts = write_top_recording(
            root, run_stem, top_capture_times(float(rel[-1]), seed), T0 + seed * 1000
        )
    with open(rec / FRAME_LOG, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(FRAME_LOG_COLUMNS)
        n_rows = len(wall) - drop_log_rows
        for i in range(n_rows):
            w.writerow([i, f"{wall[i]:.6f}", anchor + round(ts_rel[i] * 1e9)])
        if frame_log_extra:
            w.writerow([n_rows, f"{wall[-1] + 0.04:.6f}", anchor])
    # states: trial_start, moves with commanded + measured @50 Hz, gripper events, trial_end
    rows: list[dict[str, object]] = [
        {"ts": wall[0] - 0.05, "event_type": "trial_start", "note": run_stem}
    ]
    pose = [0.0, 0.0, 0.0, 0.0, 0.0, -30.0]
    rows.append({"ts": wall[0] + 0.1, "event_type": "gripper", "gripper_state": 100})
    trial.gripper.append((wall[0] + 0.1, 100.0))
    for k, (start, end, target) in enumerate(_moves(wall[0], float(wall[-1] - wall[0]))):
        rows.append({"ts": start, "event_type": "stage", "stage": f"stage{k + 3}"})
        rows.append({"ts": start + 0.001, "event_type": "commanded", "ts_send": start, "ts_arrival": end, "attempt": 1, "arrived": 1,
                     **{f"j{j}": target[j] for j in range(6)}, "speed": 20})  # fmt: skip
        trial.commanded.append((start + 0.001, target))  # the row's ts: written at the send
        for t in np.arange(start + 0.02, end + 1e-9, 0.02):
            a = min(1.0, (t - start) / (end - start))
            angles = [pose[j] + a * (target[j] - pose[j]) for j in range(6)]
            rows.append(
                {
                    "ts": float(t),
                    "event_type": "measured",
                    **{f"j{j}": round(angles[j], 4) for j in range(6)},
                }
            )
            trial.measured.append((float(t), [round(x, 4) for x in angles]))
        pose = target
        if k == 0:
            rows.append({"ts": end + 0.2, "event_type": "gripper", "gripper_state": 20})
            trial.gripper.append((end + 0.2, 20.0))
    rows.append({"ts": wall[-1] + 0.01, "event_type": "trial_end", "note": run_stem})
    with open(rec / STATES, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=STATES_COLUMNS, restval="")
        w.writeheader()
        w.writerows(sorted(rows, key=lambda r: float(r["ts"])))  # type: ignore[arg-type]  # the recorder writes in time order
    if write_meta:
        meta = {
            "run_stem": run_stem, "started_ts": float(wall[0]), "ended_ts": float(wall[-1]),
            "elapsed_sec": float(wall[-1] - wall[0]), "frames_captured": len(wall), "frames_written": len(wall),
            "effective_fps": len(wall) / float(wall[-1] - wall[0]), "container_fps": 30.0, "width": W, "height": H,
            "codec": "h264", "status": status, "recording_path": rec.relative_to(root).as_posix(),
        }  # fmt: skip
        (rec / META).write_text(json.dumps(meta))
    return trial


def add_ledger_row(
    root: Path,
    trial: Trial | str,
    *,
    pick: str = "yes",
    place: str = "yes",
    rec_status: str = "ok",
    status: str = "completed",
) -> None:
    stem = trial if isinstance(trial, str) else trial.run_stem
    append_row(
        ledger_path(root),
        {
            "run_stem": stem, "started_at": "2025-11-30T10:00:00", "ended_at": "2025-11-30T10:01:30", "duration_s": 90.0,
            "status": status, "reason": "" if status == "completed" else "guard", "dry_run": 0, "scene_seed": 1,
            "pick_verdict": pick, "pick_confidence": 0.82, "place_verdict": place, "place_confidence": 0.97,
            "pick_attempts": 1, "recording_path": str(DataRoot.recording_rel(stem)), "recording_fps": 26.5,
            "recording_frames": 100, "recording_status": rec_status,
        },
    )  # fmt: skip


def add_runlog(
    root: Path,
    run_stem: str,
    *,
    rig_id: str | None = None,
    judge: str = "geometric",
    time_scale: float | None = None,
) -> Path:
    """The trial's run log as the runtime builds it (a trial line with its constants, one
    judgement), plus ``rig_id`` when given (the key runtimes from issue 15 on write). The
    constants are in the flat layout from before the settings' groups unless ``time_scale``
    is given: then nested, as today's runtime writes them."""
    constants: dict[str, object] = {"judge": judge}
    if time_scale is not None:
        constants = {"judge": {"by": judge}, "time_scale": time_scale}
    lines = [
        {"event": "trial", "ts": T0, "run_stem": run_stem, "dry_run": False, "scene_seed": 1,
         "constants": constants},
        {"event": "input", "kind": "place_verdict", "stage": "retreat_and_judge",
         "value": {"verdict": "yes", "confidence": 0.9, "reason": "inside", "judge": judge}},
        {"event": "result", "status": "completed", "reason": ""},
    ]  # fmt: skip
    log = build_runlog(lines, trace_name=DataRoot(root).trace(run_stem).name)
    if rig_id is not None:
        log["rig_id"] = rig_id
    path = DataRoot(root).runlog(run_stem)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_runlog(path, log)
    return path


def new_root(base: Path, name: str) -> Path:
    """An empty data root named ``name`` (the export's fallback rig id is this name)."""
    root = base / name
    DataRoot(root).runs.mkdir(parents=True)
    return root


def stem(i: int) -> str:
    return f"run_{i:04d}_20251130_10{i:02d}00"


@pytest.fixture(autouse=True)
def _restore_structlog() -> Any:
    """The CLI configures structlog onto pytest's captured stderr; undo it after each test."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


@pytest.fixture
def data_root(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    (root / "runs").mkdir(parents=True)
    return root


class Recs:
    """The helpers above, handed to tests as a fixture (tests cannot import conftest)."""

    write = staticmethod(write_recording)
    write_top = staticmethod(write_top_recording)
    top_capture_times = staticmethod(top_capture_times)
    T0 = T0
    ledger = staticmethod(add_ledger_row)
    runlog = staticmethod(add_runlog)
    new_root = staticmethod(new_root)
    stem = staticmethod(stem)
    read_stamp = staticmethod(read_stamp)
    stamp = staticmethod(stamp)
    capture_times = staticmethod(capture_times)


@pytest.fixture(scope="session")
def recs() -> type[Recs]:
    return Recs
