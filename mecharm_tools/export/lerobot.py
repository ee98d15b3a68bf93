"""Write recorded trials as a LeRobot v3.0 dataset, incrementally and atomically.

One export run = the trials selected from the ledger that are not yet in the
dataset. Everything the run produces is written to a staging folder first; a
refused recording is reported and left out before anything is encoded, and a
failure while encoding aborts the run with nothing committed. Episodes already in
the dataset are never rewritten: a run adds new data/video/episodes-meta files
(the next file indices), then commits by writing ``meta/mecharm_export.json`` (the
manifest: which run stem is which episode, and which files belong to the
dataset). ``info.json``, ``stats.json`` and ``tasks.parquet`` are derived from the
committed episodes and rewritten atomically after the manifest. A leftover of an
interrupted run (files no manifest lists) is removed at the start of the next one.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from mecharm_common.fsutil import atomic_write_bytes, atomic_write_json
from mecharm_common.logging import get_logger
from mecharm_tools.export import layout as L
from mecharm_tools.export.align import AlignedEpisode, align_recording
from mecharm_tools.export.config import ExportSettings
from mecharm_tools.export.outcomes import (
    EpisodeInfo,
    default_rig_id,
    episode_info,
    outcome_columns,
)
from mecharm_tools.export.recording import (
    SOURCE_NAMES,
    Recording,
    RecordingError,
    TopRecording,
    load_recording,
    load_top_recording,
    source_checksums,
)
from mecharm_tools.export.selection import (
    Candidate,
    Skipped,
    parse_select,
    read_ledger,
    resolve_crashed,
    select_trials,
    with_crashed,
)
from mecharm_tools.export.stats import (
    Stats,
    aggregate_stats,
    image_sample_indices,
    image_stats,
    image_stride,
    vector_stats,
)
from mecharm_tools.export.video import (
    ConstantRateWriter,
    decode_selected,
    decode_top,
    sample_rgb,
    scaled_size,
)

__all__ = [
    "DatasetError",
    "ExportReport",
    "ExportedEpisode",
    "export_lerobot",
    "load_dataset_state",
]

log = get_logger("export")
#: 2: episodes carry rig_id and outcome, identified by (rig_id, run_stem); data has the
#: next.* and mecharm.* columns (docs/lerobot-outcomes.md). Format 1 datasets are refused.
MANIFEST_FORMAT = 2
_MB = 1024 * 1024


class DatasetError(RuntimeError):
    """The output folder cannot take this export (not ours, other fps...); nothing was written."""


@dataclass(frozen=True)
class ExportedEpisode:
    episode_index: int
    run_stem: str
    length: int
    source_frames: int
    #: set for a crashed recording (exported with --include-crashed)
    note: str = ""
    rig_id: str = ""
    success: bool = False


@dataclass
class ExportReport:
    out: Path
    exported: list[ExportedEpisode] = field(default_factory=list)
    already: list[Skipped] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    refused: list[Skipped] = field(default_factory=list)
    total_episodes: int = 0
    total_frames: int = 0
    seconds: float = 0.0
    source_seconds: float = 0.0
    recovered: list[str] = field(default_factory=list)


@dataclass
class DatasetState:
    """What is committed in an existing dataset folder."""

    manifest: dict[str, Any]
    episode_rows: list[dict[str, Any]]

    @property
    def tasks(self) -> list[str]:
        return list(self.manifest["tasks"])

    @property
    def total_frames(self) -> int:
        return sum(int(r["length"]) for r in self.episode_rows)

    def last_index(self, prefix: str) -> tuple[int, int] | None:
        idx = [_indices(p) for p in self.manifest["files"] if p.startswith(prefix)]
        return max(idx) if idx else None


def _indices(rel: str) -> tuple[int, int]:
    parts = Path(rel).parts
    return int(parts[-2].removeprefix("chunk-")), int(Path(parts[-1]).stem.removeprefix("file-"))


def load_dataset_state(out: Path) -> DatasetState | None:
    """The committed state of ``out``; None when ``out`` is absent or empty.

    Raises DatasetError when ``out`` holds something that is not a dataset made here.
    """
    out = Path(out)
    if not out.exists() or (
        out.is_dir() and not any(p for p in out.iterdir() if not p.name.startswith(".staging-"))
    ):
        return None
    manifest_path = out / L.MANIFEST_PATH
    if not manifest_path.is_file():
        raise DatasetError(
            f"{out} is not empty and has no {L.MANIFEST_PATH}: not a dataset made by `mecharm export`"
        )
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{manifest_path} is unreadable: {exc}") from None
    if isinstance(manifest, dict) and manifest.get("format") == 1:
        raise DatasetError(
            f"{out} was made by an earlier `mecharm export` (manifest format 1): its episodes "
            "have no outcome (next.*) or rig columns, and new episodes cannot be mixed in. "
            f"Export again into a new folder (e.g. `mecharm export lerobot --root DATA_ROOT --out {out}-v2`); "
            "the recordings are the source, the old folder can then be deleted"
        )
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise DatasetError(f"{manifest_path}: unknown manifest format")
    fault = _manifest_fault(manifest)
    if fault:
        raise DatasetError(
            f"{manifest_path} is damaged: {fault}. It is how `mecharm export` knows which trials "
            f"this dataset holds; run `mecharm export verify {out}`, then export again into a new "
            "folder (the recordings are the source) or restore the file from a copy"
        )
    rows: list[dict[str, Any]] = []
    for rel in sorted(p for p in manifest["files"] if p.startswith("meta/episodes/")):
        try:
            rows.extend(pq.read_table(out / rel).to_pylist())
        except (OSError, pa.ArrowException) as exc:
            raise DatasetError(
                f"{out / rel} is unreadable ({exc}); run `mecharm export verify {out}`"
            ) from None
    rows.sort(key=lambda r: int(r["episode_index"]))
    if len(rows) != len(manifest["episodes"]):
        raise DatasetError(
            f"{out}: manifest lists {len(manifest['episodes'])} episodes, meta/episodes holds {len(rows)}"
        )
    return DatasetState(manifest, rows)


def _side_sums(sums: Any) -> tuple[tuple[str, str], ...]:
    """The side recording's four checksums of a ``sources_sha256`` (the top camera's files
    are left out: a side-only and a two-camera export see the same trial); () if absent."""
    if not isinstance(sums, dict):
        return ()
    picked: list[tuple[str, str]] = []
    for name in SOURCE_NAMES:
        value = sums.get(name)
        if not isinstance(value, str):
            return ()
        picked.append((name, value))
    return tuple(picked)


def _is(value: Any, kind: type | tuple[type, ...]) -> bool:
    """isinstance where a bool is not a number."""
    return isinstance(value, kind) and not isinstance(value, bool)


#: what an export reads of a format-2 manifest: key, type (dicts and lists checked below)
_MANIFEST_KEYS: tuple[tuple[str, type | tuple[type, ...]], ...] = (
    ("fps", int), ("robot_type", str), ("chunks_size", int),
    ("data_files_size_in_mb", (int, float)), ("video_files_size_in_mb", (int, float)),
    ("video", dict), ("tasks", list), ("episodes", list), ("files", list), ("runs", list),
)  # fmt: skip
_EPISODE_KEYS: tuple[tuple[str, type], ...] = (
    ("episode_index", int), ("run_stem", str), ("rig_id", str),
)  # fmt: skip


def _manifest_fault(m: dict[str, Any]) -> str:
    """What in a format-2 manifest the export cannot use ("" = nothing): the keys it reads,
    with their types, so a damaged file is a clear refusal, never a KeyError later."""
    for key, kind in _MANIFEST_KEYS:
        if key not in m:
            return f"no {key!r}"
        if not _is(m[key], kind):
            return f"{key!r} is {m[key]!r:.60}, not {getattr(kind, '__name__', 'a number')}"
    for key in ("height", "width"):
        if not _is(m["video"].get(key), int):
            return f"'video' has no integer {key!r}"
    top = m.get("top_video")
    if top is not None and not (
        isinstance(top, dict)
        and all(_is(top.get(k), int) for k in ("height", "width"))
        and _is(top.get("top_width", 0), int)
    ):
        return "'top_video' has no integer height, width and top_width"
    cams = m.get("cameras", ["side"])
    if not (isinstance(cams, list) and cams and all(isinstance(c, str) for c in cams)):
        return f"'cameras' is {cams!r:.60}, not a list of camera names"
    for key in ("tasks", "files"):
        if not all(isinstance(v, str) for v in m[key]):
            return f"{key!r} holds something other than text"
    for n, ep in enumerate(m["episodes"]):
        if not isinstance(ep, dict):
            return f"episodes[{n}] is not an object"
        for key, kind in _EPISODE_KEYS:
            if not _is(ep.get(key), kind):
                return f"episodes[{n}] has no {kind.__name__} {key!r}"
        sums = ep.get("sources_sha256", {})
        if not (isinstance(sums, dict) and all(isinstance(v, str) for v in sums.values())):
            return f"episodes[{n}] 'sources_sha256' is not an object of checksums"
    return ""


# ------------------------------------------------------------------ recovery


def _dataset_files(out: Path) -> Iterator[str]:
    for top in ("data", "videos", "meta/episodes"):
        base = out / top
        if base.is_dir():
            for p in base.rglob("*"):
                if p.is_file():
                    yield p.relative_to(out).as_posix()


def _recover(out: Path, state: DatasetState, settings: ExportSettings) -> list[str]:
    """Remove leftovers of an interrupted run and re-derive the small meta files if stale."""
    removed = []
    for stage in out.glob(".staging-*"):
        shutil.rmtree(stage, ignore_errors=True)
        removed.append(stage.name)
    known = set(state.manifest["files"])
    for rel in _dataset_files(out):
        if rel not in known:
            (out / rel).unlink()
            removed.append(rel)
    info_ok = False
    with contextlib.suppress(OSError, ValueError):
        info = json.loads((out / L.INFO_PATH).read_text(encoding="utf-8"))
        info_ok = (
            info.get("total_episodes") == len(state.episode_rows)
            and info.get("total_frames") == state.total_frames
        )
    if removed or not info_ok:
        _write_derived(out, state.manifest, state.episode_rows)
        if not info_ok:
            removed.append("meta/info.json, stats.json, tasks.parquet (re-derived)")
    for item in removed:
        log.warning("export_recovered", removed=item, reason="leftover of an interrupted export")
    return removed


# ------------------------------------------------------------------ derived meta


def _write_derived(out: Path, manifest: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """tasks.parquet, stats.json, info.json from the committed episodes (atomic replaces)."""
    video = manifest["video"]
    tasks = list(manifest["tasks"])
    buf = pa.BufferOutputStream()
    pq.write_table(L.tasks_table(tasks), buf)
    atomic_write_bytes(out / L.TASKS_PATH, buf.getvalue().to_pybytes())
    stats = aggregate_stats([L.stats_from_row(r) for r in rows]) if rows else {}
    _write_json4(out / L.STATS_PATH, L.stats_to_json(stats))
    info = L.info_json(
        robot_type=manifest["robot_type"],
        fps=manifest["fps"],
        total_episodes=len(rows),
        total_frames=sum(int(r["length"]) for r in rows),
        total_tasks=len(tasks),
        chunks_size=manifest["chunks_size"],
        data_files_size_in_mb=manifest["data_files_size_in_mb"],
        video_files_size_in_mb=manifest["video_files_size_in_mb"],
        feats=L.features(
            video["height"],
            video["width"],
            manifest["fps"],
            video["codec"],
            top=_top_size(manifest),
        ),
    )
    _write_json4(out / L.INFO_PATH, info)


def _cameras(manifest: dict[str, Any]) -> list[str]:
    """The dataset's cameras; a manifest written before the top camera existed: side only."""
    return list(manifest.get("cameras", ["side"]))


def _top_size(manifest: dict[str, Any]) -> tuple[int, int] | None:
    """(height, width) of the dataset's top camera video; None in a side-only dataset."""
    top = manifest.get("top_video")
    return (int(top["height"]), int(top["width"])) if top else None


def _write_json4(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=4) + "\n").encode("utf-8"))


# ------------------------------------------------------------------ the run


@dataclass
class _Prepared:
    rec: Recording
    ep: AlignedEpisode
    info: EpisodeInfo
    #: the top camera's recording (None in a side-only dataset)
    top: TopRecording | None = None


def _prepare(
    root: Path,
    cands: list[tuple[Candidate, EpisodeInfo]],
    settings: ExportSettings,
    size: tuple[int, int] | None,
    top_size: tuple[int, int] | None,
    report: ExportReport,
) -> list[_Prepared]:
    """Load, check and align each candidate; a refused one is reported and left out.

    ``size`` / ``top_size``: (height, width) the dataset's videos already have (None: the
    first trial sets them)."""
    ready: list[_Prepared] = []
    with_top = "top" in settings.cameras
    for cand, info in cands:
        try:
            rec = load_recording(
                cand.recording_dir, cand.run_stem, allow_crashed=settings.include_crashed,
                allow_synthetic=settings.allow_synthetic,
            )  # fmt: skip
            top = load_top_recording(root, cand.run_stem) if with_top else None
            # "none"/"crashed" = the runtime's deadline passed without a meta; the meta that
            # came later (the recorder's, or the repair's) decides
            if (
                cand.recording_status not in ("", "none", "crashed")
                and rec.meta.status != cand.recording_status
            ):
                raise RecordingError(
                    f"ledger says recording_status={cand.recording_status} but the meta says {rec.meta.status}"
                )
            if size is not None and (rec.height, rec.width) != size:
                raise RecordingError(
                    f"video is {rec.width}x{rec.height}, the dataset's is {size[1]}x{size[0]}"
                )
            scaled = None
            if top is not None:
                w, h = scaled_size(top.width, top.height, settings.top_width)
                scaled = (h, w)
                if top_size is not None and scaled != top_size:
                    raise RecordingError(
                        f"top camera is {top.width}x{top.height} (in the dataset {w}x{h} at "
                        f"top_width {settings.top_width}), the dataset's top video is "
                        f"{top_size[1]}x{top_size[0]}"
                    )
            ep = align_recording(
                rec,
                settings.fps,
                max_interp_gap_s=settings.max_interp_gap_s,
                gripper_settle_s=settings.gripper_settle_s,
                max_frame_offset_s=settings.max_frame_offset_s,
                top_ts=top.frame_ts if top is not None else None,
            )
        except RecordingError as exc:
            report.refused.append(Skipped(cand.run_stem, str(exc)))
            log.warning("export_refused", run_stem=cand.run_stem, reason=str(exc))
            continue
        size = size or (rec.height, rec.width)
        top_size = top_size or scaled
        # the meta's status is the truth once the ledger's agrees (or deferred to it, above)
        ready.append(_Prepared(rec, ep, replace(info, recording_status=rec.meta.status), top))
    return ready


def _top_provenance(prep: _Prepared) -> dict[str, Any]:
    """The top recording's frame count and worst row distance, for the manifest."""
    if prep.top is None or prep.ep.top_offsets is None:
        return {}
    return {
        "top_source_frames": len(prep.top.frame_ts),
        "top_max_frame_offset_s": round(float(prep.ep.top_offsets.max()), 6),
    }


def _note(rec: Recording) -> str:
    if not rec.crashed:
        return ""
    return f"crashed recording, {rec.meta.seconds_lost or 0:.3f} s lost at its end"


def _fsync(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


class _Writer:
    """Stages new data/video/episodes files and the rows describing them.

    Each camera has its own video files (``videos/<key>/chunk-CCC/file-FFF.mp4``), file
    indices and size limit, as lerobot keeps them."""

    def __init__(
        self,
        stage: Path,
        settings: ExportSettings,
        state: DatasetState | None,
        sizes: dict[str, tuple[int, int]],
    ) -> None:
        self.stage, self.s = stage, settings
        #: (height, width) of each camera's video, by video key, in feature order
        self.sizes = sizes
        self.video_keys = tuple(sizes)
        cs = settings.chunks_size

        def start(prefix: str) -> tuple[int, int]:
            last = state.last_index(prefix) if state else None
            return L.next_file(*last, cs) if last else (0, 0)

        self.data_idx = start("data/")
        self.video_idx = {key: start(f"videos/{key}/") for key in self.video_keys}
        self.meta_idx = start("meta/episodes/")
        self.files: list[str] = []
        self._data: pq.ParquetWriter | None = None
        self._videos: dict[str, ConstantRateWriter | None] = dict.fromkeys(self.video_keys)
        self.rows: list[dict[str, Any]] = []

    def _path(self, template: str, idx: tuple[int, int], video_key: str = L.VIDEO_KEY) -> str:
        return template.format(chunk_index=idx[0], file_index=idx[1], video_key=video_key)

    def _open_data(self) -> pq.ParquetWriter:
        if self._data is None:
            rel = self._path(L.DATA_PATH, self.data_idx)
            (self.stage / rel).parent.mkdir(parents=True, exist_ok=True)
            self._data = pq.ParquetWriter(self.stage / rel, L.data_schema(), compression="snappy")
            self.files.append(rel)
        return self._data

    def _open_video(self, key: str) -> ConstantRateWriter:
        video = self._videos[key]
        if video is None:
            rel = self._path(L.VIDEO_PATH, self.video_idx[key], key)
            (self.stage / rel).parent.mkdir(parents=True, exist_ok=True)
            s = self.s
            height, width = self.sizes[key]
            video = self._videos[key] = ConstantRateWriter(
                self.stage / rel,
                fps=s.fps,
                width=width,
                height=height,
                preset=s.preset,
                crf=s.crf,
                gop=s.gop,
            )
            self.files.append(rel)
        return video

    def _row_frames(self, key: str, prep: _Prepared) -> Generator[av.VideoFrame, None, None]:
        """The frame of each row of the episode for camera ``key``, decoded in a worker."""
        ep, rec = prep.ep, prep.rec
        if key == L.TOP_VIDEO_KEY:
            assert prep.top is not None and ep.top_frames is not None
            rows = ep.top_frames
            height, width = self.sizes[key]
            frames = decode_top(
                prep.top.video_path,
                np.unique(rows),
                len(prep.top.frame_ts),
                (width, height),
                prep.top.width,
            )
        else:
            rows = ep.source_frames
            frames = decode_selected(
                rec.video_path, np.unique(rows), len(rec.frame_ts), only_first=rec.crashed
            )
        row = 0
        for src, frame in frames:
            while row < len(rows) and rows[row] == src:
                yield frame
                row += 1
        if row != len(rows):  # pragma: no cover - the decoders raise first
            raise RecordingError(
                f"{rec.run_stem}: only {row} of {len(rows)} rows got a {key} frame"
            )

    def add(
        self,
        prep: _Prepared,
        episode_index: int,
        start_index: int,
        task_index: int,
        task: str,
        tick: Callable[[int], None],
    ) -> None:
        ep, rec, fps = prep.ep, prep.rec, self.s.fps
        n = len(ep)
        frame_index = np.arange(n, dtype=np.int64)
        index = start_index + frame_index
        ts32 = ep.timestamps.astype(np.float32)
        keys = self.video_keys
        videos = {key: self._open_video(key) for key in keys}
        from_ts = {key: videos[key].frames / fps for key in keys}
        sample_at = {int(r) for r in image_sample_indices(n)}
        strides = {key: image_stride(*self.sizes[key]) for key in keys}
        samples: dict[str, list[np.ndarray]] = {key: [] for key in keys}
        # every camera's decoder runs in its own worker; each row is encoded camera by camera
        sources = {key: self._row_frames(key, prep) for key in keys}
        try:
            for row in range(n):
                for key in keys:
                    frame = next(sources[key], None)
                    if frame is None:  # pragma: no cover - the decoders raise first
                        raise RecordingError(f"{rec.run_stem}: row {row} got no {key} frame")
                    if row in sample_at:
                        samples[key].append(sample_rgb(frame, strides[key]))
                    videos[key].add(frame)
                tick(1)
            for source in sources.values():
                for _ in source:  # runs the decoders' end-of-file checks (frame counts)
                    pass  # pragma: no cover - one frame per row
        finally:
            for source in sources.values():
                source.close()
        to_ts = {key: videos[key].frames / fps for key in keys}
        schema = L.data_schema()
        vec = schema.field("action").type
        outcome = outcome_columns(n, prep.info.success)
        data = {
            "observation.state": pa.FixedSizeListArray.from_arrays(
                pa.array(ep.state.reshape(-1), pa.float32()), type=vec
            ),
            "action": pa.FixedSizeListArray.from_arrays(
                pa.array(ep.action.reshape(-1), pa.float32()), type=vec
            ),
            **outcome,
            **{
                f"mecharm.{k}": pa.repeat(pa.scalar(v, pa.string()), n)
                for k, v in zip(L.EPISODE_FIELDS, _fields(prep.info), strict=True)
            },
            "timestamp": pa.array(ts32, pa.float32()),
            "frame_index": pa.array(frame_index),
            "episode_index": pa.array(np.full(n, episode_index, np.int64)),
            "index": pa.array(index),
            "task_index": pa.array(np.full(n, task_index, np.int64)),
        }
        self._open_data().write_table(pa.table(data, schema=schema))
        stats: dict[str, Stats] = {
            "observation.state": vector_stats(ep.state),
            "action": vector_stats(ep.action),
            **{key: image_stats(np.stack(samples[key])) for key in keys},
            **{k: vector_stats(v) for k, v in outcome.items()},
            "timestamp": vector_stats(ts32),
            "frame_index": vector_stats(frame_index),
            "episode_index": vector_stats(np.full(n, episode_index, np.int64)),
            "index": vector_stats(index),
            "task_index": vector_stats(np.full(n, task_index, np.int64)),
        }
        meta: dict[str, Any] = {
            "episode_index": episode_index,
            "tasks": [task],
            "length": n,
            "data/chunk_index": self.data_idx[0],
            "data/file_index": self.data_idx[1],
            "dataset_from_index": int(index[0]),
            "dataset_to_index": int(index[-1]) + 1,
        }
        for key in keys:
            meta[f"videos/{key}/chunk_index"] = self.video_idx[key][0]
            meta[f"videos/{key}/file_index"] = self.video_idx[key][1]
            meta[f"videos/{key}/from_timestamp"] = from_ts[key]
            meta[f"videos/{key}/to_timestamp"] = to_ts[key]
        for feat in L.feature_order(keys):
            for stat, value in stats[feat].items():
                meta[f"stats/{feat}/{stat}"] = np.asarray(value).tolist()
        meta["meta/episodes/chunk_index"], meta["meta/episodes/file_index"] = self.meta_idx
        for k, v in zip(L.EPISODE_FIELDS, _fields(prep.info), strict=True):
            meta[f"mecharm/{k}"] = v
        meta[L.SUCCESS_COLUMN] = prep.info.success
        self.rows.append(meta)
        self._roll()

    def _roll(self) -> None:
        """Start new files once the current ones reach lerobot's size limits."""
        cs = self.s.chunks_size
        if self._data is not None:
            rel = self._path(L.DATA_PATH, self.data_idx)
            if (self.stage / rel).stat().st_size >= self.s.data_files_size_in_mb * _MB:
                self._data.close()
                self._data = None
                self.data_idx = L.next_file(*self.data_idx, cs)
        for key, video in self._videos.items():
            if video is not None and video.size_bytes() >= self.s.video_files_size_in_mb * _MB:
                video.close()
                self._videos[key] = None
                self.video_idx[key] = L.next_file(*self.video_idx[key], cs)

    def close(self) -> None:
        if self._data is not None:
            self._data.close()
            self._data = None
        for key, video in self._videos.items():
            if video is not None:
                video.close()
                self._videos[key] = None
        if self.rows:
            rel = self._path(L.EPISODES_PATH, self.meta_idx)
            (self.stage / rel).parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(
                pa.Table.from_pylist(self.rows, schema=L.episodes_schema(self.video_keys)),
                self.stage / rel,
                compression="snappy",
            )
            self.files.append(rel)

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            if self._data is not None:
                self._data.close()
        for video in self._videos.values():
            with contextlib.suppress(Exception):
                if video is not None:
                    video.close()


def _fields(info: EpisodeInfo) -> list[str]:
    return [getattr(info, k) for k in L.EPISODE_FIELDS]


def _new_manifest(
    settings: ExportSettings, size: tuple[int, int], top_size: tuple[int, int] | None
) -> dict[str, Any]:
    top = (
        {"top_video": {"key": L.TOP_VIDEO_KEY, "codec": "h264", "height": top_size[0],
                       "width": top_size[1], "top_width": settings.top_width}}
        if top_size is not None
        else {}
    )  # fmt: skip
    return {
        "format": MANIFEST_FORMAT,
        "exporter": "mecharm_tools.export",
        "fps": settings.fps,
        "robot_type": settings.robot_type,
        "chunks_size": settings.chunks_size,
        "data_files_size_in_mb": settings.data_files_size_in_mb,
        "video_files_size_in_mb": settings.video_files_size_in_mb,
        "video": {"key": L.VIDEO_KEY, "codec": "h264", "height": size[0], "width": size[1]},
        "cameras": list(settings.cameras),
        **top,
        "tasks": [],
        "episodes": [],
        "files": [],
        "runs": [],
    }


def _settings_snapshot(s: ExportSettings) -> dict[str, Any]:
    keys = ("fps", "task", "select", "rig_id", "max_interp_gap_s", "gripper_settle_s",
            "max_frame_offset_s", "cameras", "top_width", "preset", "crf", "gop")  # fmt: skip
    return {k: getattr(s, k) for k in keys}


@contextlib.contextmanager
def _exclusive(out: Path) -> Iterator[None]:
    """One export per dataset at a time: an flock on ``.{name}.lock`` next to it."""
    out = out.absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    lock_path = out.parent / f".{out.name}.lock"
    with open(lock_path, "a+") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DatasetError(f"another export into {out} is running (lock {lock_path})") from None
        yield


def export_lerobot(
    root: Path,
    out: Path,
    settings: ExportSettings,
    *,
    runs: set[str] | None = None,
    dry_run: bool = False,
) -> ExportReport:
    """Export the selected, not yet exported trials of ``root`` into the dataset ``out``.

    Raises DatasetError / LedgerReadError (nothing written) and RecordingError when a
    recording fails while encoding (the run is aborted, nothing committed).
    """
    if Path(out).exists() and not Path(out).is_dir():
        raise DatasetError(f"{out} exists and is not a folder")
    if dry_run:
        return _export(Path(root), Path(out), settings, runs, dry_run)
    with _exclusive(Path(out)):
        return _export(Path(root), Path(out), settings, runs, dry_run)


def _export(
    root: Path, out: Path, settings: ExportSettings, runs: set[str] | None, dry_run: bool
) -> ExportReport:
    t_start = time.perf_counter()
    root, out = Path(root), Path(out)
    report = ExportReport(out)
    conditions = parse_select(settings.select)
    state = load_dataset_state(out)
    if state is not None:
        m = state.manifest
        if m["fps"] != settings.fps:
            raise DatasetError(
                f"{out} is a {m['fps']} fps dataset; cannot add episodes at --fps {settings.fps}"
            )
        if m["robot_type"] != settings.robot_type:
            raise DatasetError(
                f"{out} has robot_type {m['robot_type']!r}, settings say {settings.robot_type!r}"
            )
        if _cameras(m) != list(settings.cameras):
            raise DatasetError(
                f"{out} was first exported with cameras {','.join(_cameras(m))}; cannot add "
                f"episodes with --cameras {','.join(settings.cameras)} (pass --cameras "
                f"{','.join(_cameras(m))}, or export into a new folder)"
            )
        top_m = m.get("top_video")
        if top_m and int(top_m.get("top_width", settings.top_width)) != settings.top_width:
            raise DatasetError(
                f"{out} was first exported with top_width {top_m['top_width']} (top video "
                f"{top_m['width']}x{top_m['height']}); cannot add episodes at top_width "
                f"{settings.top_width} (pass --top-width {top_m['top_width']}, or a new folder)"
            )
        if not dry_run:
            report.recovered = _recover(out, state, settings)
    if state is None and not dry_run:
        for left in out.parent.glob(f".{out.name}.staging-*"):
            shutil.rmtree(left, ignore_errors=True)  # a first export that was interrupted
    rows = read_ledger(root)
    if settings.include_crashed:
        conditions = with_crashed(conditions)
        rows = resolve_crashed(root, rows)
    if runs:
        unknown = sorted(runs - {row.get("run_stem", "") for _line, row in rows})
        if unknown:  # a typo must not export an empty dataset and exit 0
            raise DatasetError(
                f"--run {', '.join(unknown)}: no such trial in {root}'s ledger "
                "(the ledger's run_stem column and the report list them)"
            )
    cands, report.skipped = select_trials(root, rows, conditions, runs)
    # an episode is (rig id, run stem): another rig's run_0001_... is a new episode
    done = (
        {(e["rig_id"], e["run_stem"]): e["episode_index"] for e in state.manifest["episodes"]}
        if state
        else {}
    )
    fallback_rig = default_rig_id(root, settings.rig_id)
    # the same recording files are the same trial, whatever rig id it gets this time (a
    # trial without a run-log rig id gets the fallback, which follows the folder and flags)
    by_sources = {
        _side_sums(e.get("sources_sha256")): e
        for e in (state.manifest["episodes"] if state else [])
        if _side_sums(e.get("sources_sha256", {}))
    }
    sums_of: dict[str, dict[str, str]] = {}
    new: list[tuple[Candidate, EpisodeInfo]] = []
    for cand in cands:
        info = episode_info(
            root,
            cand.run_stem,
            {"pick_verdict": cand.pick_verdict, "place_verdict": cand.place_verdict},
            cand.recording_status,
            fallback_rig,
        )
        if info.key in done:
            report.already.append(
                Skipped(cand.run_stem, f"already exported as episode {done[info.key]}")
            )
            continue
        sums = source_checksums(cand.recording_dir) if by_sources else None
        same = by_sources.get(_side_sums(sums)) if sums else None
        if same is not None:
            report.already.append(
                Skipped(
                    cand.run_stem,
                    f"already exported as episode {same['episode_index']} (rig id "
                    f"{same['rig_id']}, run {same['run_stem']}): the same recording files",
                )
            )
            continue
        if sums:
            sums_of[cand.run_stem] = sums
        new.append((cand, info))
    size = (state.manifest["video"]["height"], state.manifest["video"]["width"]) if state else None
    top_size = _top_size(state.manifest) if state else None
    ready = _prepare(root, new, settings, size, top_size, report)
    n_old = len(state.episode_rows) if state else 0
    report.total_episodes = n_old + (0 if dry_run else len(ready))
    report.total_frames = state.total_frames if state else 0
    if dry_run or not ready:
        report.exported = (
            [
                ExportedEpisode(
                    n_old + i,
                    p.rec.run_stem,
                    len(p.ep),
                    len(p.rec.frame_ts),
                    _note(p.rec),
                    p.info.rig_id,
                    p.info.success,
                )
                for i, p in enumerate(ready)
            ]
            if dry_run
            else []
        )
        report.seconds = time.perf_counter() - t_start
        return report

    size = (ready[0].rec.height, ready[0].rec.width)
    first_top = ready[0].top
    if first_top is not None and top_size is None:
        w, h = scaled_size(first_top.width, first_top.height, settings.top_width)
        top_size = (h, w)
    manifest = (
        json.loads(json.dumps(state.manifest)) if state else _new_manifest(settings, size, top_size)
    )
    sizes = {L.VIDEO_KEY: size}
    if top_size is not None:
        sizes[L.TOP_VIDEO_KEY] = top_size
    fresh = state is None
    stage = (
        (out.parent / f".{out.name}.staging-{uuid.uuid4().hex[:8]}")
        if fresh
        else (out / f".staging-{uuid.uuid4().hex[:8]}")
    )
    stage.mkdir(parents=True)
    writer = _Writer(stage, settings, state, sizes)
    try:
        if settings.task not in manifest["tasks"]:
            manifest["tasks"].append(settings.task)
        task_index = manifest["tasks"].index(settings.task)
        start = report.total_frames
        total_rows = sum(len(p.ep) for p in ready)
        with tqdm(
            total=total_rows,
            unit="frame",
            desc="export",
            disable=not settings.progress,
            leave=False,
        ) as bar:
            for i, prep in enumerate(ready):
                ep_index = n_old + i
                writer.add(prep, ep_index, start, task_index, settings.task, bar.update)
                start += len(prep.ep)
                report.exported.append(
                    ExportedEpisode(
                        ep_index,
                        prep.rec.run_stem,
                        len(prep.ep),
                        len(prep.rec.frame_ts),
                        _note(prep.rec),
                        prep.info.rig_id,
                        prep.info.success,
                    )
                )
                report.source_seconds += prep.rec.duration_s
                manifest["episodes"].append(
                    {
                        "episode_index": ep_index,
                        "run_stem": prep.rec.run_stem,
                        "rig_id": prep.info.rig_id,
                        "pick_verdict": prep.info.pick_verdict,
                        "place_verdict": prep.info.place_verdict,
                        "judge": prep.info.judge,
                        "success": prep.info.success,
                        "recording_status": prep.rec.meta.status,
                        "recording_path": prep.rec.path.relative_to(root.resolve()).as_posix()
                        if prep.rec.path.is_relative_to(root.resolve())
                        else str(prep.rec.path),
                        "length": len(prep.ep),
                        "source_frames": len(prep.rec.frame_ts),
                        "source_duration_s": round(prep.rec.duration_s, 6),
                        "max_frame_offset_s": round(float(prep.ep.frame_offsets.max()), 6),
                        "sources_sha256": (sums_of.get(prep.rec.run_stem) or prep.rec.checksums())
                        | (prep.top.checksums() if prep.top else {}),
                        **_top_provenance(prep),
                    }
                )
                log.info(
                    "export_episode",
                    episode_index=ep_index,
                    run_stem=prep.rec.run_stem,
                    rig_id=prep.info.rig_id,
                    success=prep.info.success,
                    frames=len(prep.ep),
                )
        writer.close()
    except BaseException as exc:
        writer.abort()
        shutil.rmtree(stage, ignore_errors=True)
        log.error("export_aborted", reason=f"{type(exc).__name__}: {exc}", committed=False)
        raise
    new_rows = (state.episode_rows if state else []) + writer.rows
    manifest["files"] = sorted(set(manifest["files"]) | set(writer.files))
    manifest["runs"].append(
        {
            "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "root": str(root.resolve()),
            "episodes": [e.episode_index for e in report.exported],
            "files": writer.files,
            "settings": _settings_snapshot(settings),
        }
    )
    try:
        _commit(out, stage, fresh, manifest, new_rows, writer.files)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    report.total_episodes = len(new_rows)
    report.total_frames = sum(int(r["length"]) for r in new_rows)
    report.seconds = time.perf_counter() - t_start
    log.info(
        "export_done",
        episodes=len(report.exported),
        total_episodes=report.total_episodes,
        seconds=round(report.seconds, 2),
    )
    return report


def _commit(
    out: Path,
    stage: Path,
    fresh: bool,
    manifest: dict[str, Any],
    rows: list[dict[str, Any]],
    files: list[str],
) -> None:
    for rel in files:
        _fsync(stage / rel)
    if fresh:
        (stage / "meta").mkdir(parents=True, exist_ok=True)
        atomic_write_json(stage / L.MANIFEST_PATH, manifest)
        _write_derived(stage, manifest, rows)
        if out.exists():  # load_dataset_state saw it empty (at most staging leftovers)
            for left in out.glob(".staging-*"):
                shutil.rmtree(left, ignore_errors=True)
            out.rmdir()
        os.replace(stage, out)
        return
    for rel in files:
        dest = out / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(stage / rel, dest)
    atomic_write_json(out / L.MANIFEST_PATH, manifest)  # the commit point
    _write_derived(out, manifest, rows)
