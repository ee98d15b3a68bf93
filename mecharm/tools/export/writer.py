"""One export run's new files: load, check and align each selected trial, then write its
frames, videos and episode rows into the staging folder (lerobot.py commits them)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mecharm.common.logging import get_logger
from mecharm.tools.export import layout as L
from mecharm.tools.export.align import AlignedEpisode, align_recording
from mecharm.tools.export.config import ExportSettings
from mecharm.tools.export.dataset import DatasetState
from mecharm.tools.export.outcomes import EpisodeInfo, outcome_columns
from mecharm.tools.export.recording import (
    Recording,
    RecordingError,
    TopRecording,
    load_recording,
    load_top_recording,
)
from mecharm.tools.export.selection import Candidate, Skipped
from mecharm.tools.export.stats import (
    Stats,
    image_sample_indices,
    image_stats,
    image_stride,
    vector_stats,
)
from mecharm.tools.export.video import (
    ConstantRateWriter,
    decode_selected,
    decode_top,
    resized,
    sample_rgb,
    scaled_size,
)

__all__ = ["EpisodeWriter", "Prepared", "prepare"]

log = get_logger("export")

_MB = 1024 * 1024


@dataclass
class Prepared:
    rec: Recording
    ep: AlignedEpisode
    info: EpisodeInfo
    #: the top camera's recording (None in a side-only dataset)
    top: TopRecording | None = None


def prepare(
    root: Path,
    cands: list[tuple[Candidate, EpisodeInfo]],
    settings: ExportSettings,
    size: tuple[int, int] | None,
    top_size: tuple[int, int] | None,
    refused: list[Skipped],
) -> list[Prepared]:
    """Load, check and align each candidate; a refused one is reported and left out.

    ``size`` / ``top_size``: (height, width) the dataset's videos already have (None: the
    first trial sets them)."""
    ready: list[Prepared] = []
    with_top = "top" in settings.cameras
    for cand, info in cands:
        try:
            rec = load_recording(
                cand.recording_dir, cand.run_stem, allow_crashed=settings.include_crashed,
                allow_synthetic=settings.allow_synthetic,
            )  # fmt: skip
            top = load_top_recording(root, cand.run_stem, settings.trials_of) if with_top else None
            # "none"/"crashed" = the runtime's deadline passed without a meta; the meta that
            # came later (the recorder's, or the repair's) decides
            if (
                cand.recording_status not in ("", "none", "crashed")
                and rec.meta.status != cand.recording_status
            ):
                raise RecordingError(
                    f"ledger says recording_status={cand.recording_status} but the meta says {rec.meta.status}"
                )
            sw, sh = scaled_size(rec.width, rec.height, settings.side_width)
            if size is not None and (sh, sw) != size:
                raise RecordingError(
                    f"video is {rec.width}x{rec.height} (in the dataset {sw}x{sh} at side_width "
                    f"{settings.side_width}), the dataset's is {size[1]}x{size[0]}"
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
                action=settings.action,
            )
        except RecordingError as exc:
            refused.append(Skipped(cand.run_stem, str(exc)))
            log.warning("export_refused", run_stem=cand.run_stem, reason=str(exc))
            continue
        size = size or (sh, sw)
        top_size = top_size or scaled
        # the meta's status is the truth once the ledger's agrees (or deferred to it, above)
        ready.append(Prepared(rec, ep, replace(info, recording_status=rec.meta.status), top))
    return ready


def _resizing(
    frames: Iterator[tuple[int, av.VideoFrame]], width: int, height: int
) -> Generator[tuple[int, av.VideoFrame], None, None]:
    """``frames`` at ``width`` x ``height``; closing this closes the decoder's worker."""
    try:
        for i, f in frames:
            yield i, resized(f, width, height)
    finally:
        close = getattr(frames, "close", None)
        if close is not None:
            close()


def top_provenance(prep: Prepared) -> dict[str, Any]:
    """The top recording's frame count and worst row distance, for the manifest."""
    if prep.top is None or prep.ep.top_offsets is None:
        return {}
    return {
        "top_source_frames": len(prep.top.frame_ts),
        "top_max_frame_offset_s": round(float(prep.ep.top_offsets.max()), 6),
    }


def crash_note(rec: Recording) -> str:
    if not rec.crashed:
        return ""
    return f"crashed recording, {rec.meta.seconds_lost or 0:.3f} s lost at its end"


def fsync_file(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


class EpisodeWriter:
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
        #: the per-episode fields of the task's datasets (layout.episode_fields)
        self.fields = L.episode_fields(settings.records.verdicts)
        #: the outcome and per-episode columns too (export setting ``columns``)
        self.extras = settings.columns == "all"
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
            self._data = pq.ParquetWriter(
                self.stage / rel, L.data_schema(self.fields, self.extras), compression="snappy"
            )
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

    def _row_frames(self, key: str, prep: Prepared) -> Generator[av.VideoFrame, None, None]:
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
            height, width = self.sizes[key]
            frames = decode_selected(
                rec.video_path, np.unique(rows), len(rec.frame_ts), only_first=rec.crashed
            )
            if (rec.height, rec.width) != (height, width):  # --side-width: the dataset's size
                frames = _resizing(frames, width, height)
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
        prep: Prepared,
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
        schema = L.data_schema(self.fields, self.extras)
        vec = schema.field("action").type
        outcome = outcome_columns(n, prep.info.success) if self.extras else {}
        per_episode = zip(self.fields, prep.info.values(), strict=True) if self.extras else ()
        data = {
            "observation.state": pa.FixedSizeListArray.from_arrays(
                pa.array(ep.state.reshape(-1), pa.float32()), type=vec
            ),
            "action": pa.FixedSizeListArray.from_arrays(
                pa.array(ep.action.reshape(-1), pa.float32()), type=vec
            ),
            **outcome,
            **{f"mecharm.{k}": pa.repeat(pa.scalar(v, pa.string()), n) for k, v in per_episode},
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
        for feat in L.feature_order(keys, self.extras):
            for stat, value in stats[feat].items():
                meta[f"stats/{feat}/{stat}"] = np.asarray(value).tolist()
        meta["meta/episodes/chunk_index"], meta["meta/episodes/file_index"] = self.meta_idx
        if self.extras:
            for k, v in zip(self.fields, prep.info.values(), strict=True):
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
                pa.Table.from_pylist(
                    self.rows, schema=L.episodes_schema(self.video_keys, self.fields, self.extras)
                ),
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
