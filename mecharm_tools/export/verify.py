"""Check a LeRobot v3.0 dataset without torch: pyarrow for the tables, PyAV for the video.

Checks: info.json keys and features, tasks, the episodes-meta schema, contiguous
episode indices and global indices, each episode's index range and data rows
(frame_index 0..n-1, timestamp = frame_index / fps, episode and task indices),
per-episode stats recomputed from the data (image stats from the decoded video, to
H.264 tolerance) and the dataset stats re-aggregated, no file outside the episode
tables, and that every row's timestamp decodes to a frame within 1e-4 s — the
tolerance lerobot applies when it loads a frame by timestamp.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow.parquet as pq
from tqdm import tqdm

from mecharm_tools.export import layout as L
from mecharm_tools.export.stats import (
    STAT_KEYS,
    aggregate_stats,
    image_sample_indices,
    image_stats,
    image_stride,
    vector_stats,
)
from mecharm_tools.export.video import sample_rgb

__all__ = ["TOLERANCE_S", "VerifyReport", "verify_dataset"]

TOLERANCE_S = 1e-4
INFO_KEYS = ("codebase_version", "robot_type", "total_episodes", "total_frames", "total_tasks", "chunks_size",
             "data_files_size_in_mb", "video_files_size_in_mb", "fps", "splits", "data_path", "video_path", "features")  # fmt: skip
#: decoded-vs-source difference allowed for image stats (H.264 is lossy)
IMAGE_STATS_ATOL = 0.03


@dataclass
class VerifyReport:
    path: Path
    episodes: int = 0
    frames: int = 0
    videos_checked: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def _close(a: Any, b: Any, rtol: float = 1e-9, atol: float = 1e-9) -> bool:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=atol))


def _check_stats(
    where: str, got: dict[str, Any], want: dict[str, Any], errors: list[str], atol: float = 1e-9
) -> None:
    for stat in STAT_KEYS:
        if stat not in got:
            errors.append(f"{where}: missing {stat}")
        elif not _close(got[stat], want[stat], rtol=1e-6 if atol <= 1e-9 else 0, atol=atol):
            errors.append(
                f"{where}/{stat}: stored {np.asarray(got[stat]).ravel()[:7].tolist()} != recomputed {np.asarray(want[stat]).ravel()[:7].tolist()}"
            )


def verify_dataset(root: Path, *, check_video: bool = True, progress: bool = False) -> VerifyReport:
    """Check the dataset in ``root``; every problem becomes one line of ``errors``."""
    try:
        return _verify(Path(root), check_video, progress)
    except Exception as exc:  # a malformed file must give a report, not a traceback
        rep = VerifyReport(Path(root))
        rep.errors.append(f"cannot be checked: {type(exc).__name__}: {exc}")
        return rep


def _verify(root: Path, check_video: bool, progress: bool) -> VerifyReport:
    rep = VerifyReport(root)
    err = rep.errors
    try:
        info = json.loads((root / L.INFO_PATH).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        err.append(f"{L.INFO_PATH}: unreadable: {exc}")
        return rep
    if sorted(info) != sorted(INFO_KEYS):
        err.append(f"{L.INFO_PATH}: keys {sorted(info)} != {sorted(INFO_KEYS)}")
        return rep
    if info["codebase_version"] != L.CODEBASE_VERSION:
        err.append(
            f"{L.INFO_PATH}: codebase_version {info['codebase_version']!r} is not {L.CODEBASE_VERSION}"
        )
    fps = info["fps"]
    feats = info["features"]
    vinfo = feats.get(L.VIDEO_KEY, {})
    h, w = (vinfo.get("shape") or [0, 0])[:2]
    expected_feats = L.features(h, w, fps, vinfo.get("info", {}).get("video.codec", "h264"))
    if feats != expected_feats:
        err.append(f"{L.INFO_PATH}: features differ from the expected {list(expected_feats)}")
    if info["data_path"] != L.DATA_PATH or info["video_path"] != L.VIDEO_PATH:
        err.append(f"{L.INFO_PATH}: data_path/video_path templates differ from lerobot's")

    # tasks
    try:
        tasks = pq.read_table(root / L.TASKS_PATH)
        if tasks.column_names != ["task_index", "__index_level_0__"]:
            err.append(f"{L.TASKS_PATH}: columns {tasks.column_names}")
        elif tasks.column("task_index").to_pylist() != list(range(tasks.num_rows)):
            err.append(f"{L.TASKS_PATH}: task_index is not 0..{tasks.num_rows - 1}")
        n_tasks = tasks.num_rows
        task_names = tasks.column("__index_level_0__").to_pylist() if tasks.num_rows else []
    except (OSError, KeyError) as exc:
        err.append(f"{L.TASKS_PATH}: unreadable: {exc}")
        return rep
    if info["total_tasks"] != n_tasks:
        err.append(f"total_tasks {info['total_tasks']} != {n_tasks} rows in {L.TASKS_PATH}")

    # episodes meta
    ep_files = sorted((root / "meta" / "episodes").rglob("*.parquet"))
    schema = L.episodes_schema()
    rows: list[dict[str, Any]] = []
    for path in ep_files:
        rel = path.relative_to(root).as_posix()
        table = pq.read_table(path)
        if not table.schema.equals(schema, check_metadata=False):
            err.append(f"{rel}: schema differs from the episodes schema")
            continue
        for row in table.to_pylist():
            if (
                L.EPISODES_PATH.format(
                    chunk_index=row["meta/episodes/chunk_index"],
                    file_index=row["meta/episodes/file_index"],
                )
                != rel
            ):
                err.append(
                    f"{rel}: episode {row['episode_index']} says it lives in another meta file"
                )
            rows.append(row)
    rows.sort(key=lambda r: r["episode_index"])
    rep.episodes = len(rows)
    if [r["episode_index"] for r in rows] != list(range(len(rows))):
        err.append("episode_index is not contiguous from 0")
    if info["total_episodes"] != len(rows):
        err.append(
            f"total_episodes {info['total_episodes']} != {len(rows)} episodes in meta/episodes"
        )
    if info["splits"] != {"train": f"0:{len(rows)}"}:
        err.append(f"splits {info['splits']} != train 0:{len(rows)}")
    expect_from = 0
    for r in rows:
        if (
            r["dataset_from_index"] != expect_from
            or r["dataset_to_index"] - r["dataset_from_index"] != r["length"]
        ):
            err.append(f"episode {r['episode_index']}: index range [{r['dataset_from_index']}, {r['dataset_to_index']}) "
                       f"length {r['length']}, expected to start at {expect_from}")  # fmt: skip
        expect_from = r["dataset_to_index"]
        for t in r["tasks"]:
            if t not in task_names:
                err.append(f"episode {r['episode_index']}: task {t!r} not in {L.TASKS_PATH}")
    if info["total_frames"] != expect_from:
        err.append(
            f"total_frames {info['total_frames']} != {expect_from} rows described by the episodes"
        )

    # data files
    data_schema = L.data_schema()
    by_file: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_file.setdefault(
            L.DATA_PATH.format(chunk_index=r["data/chunk_index"], file_index=r["data/file_index"]),
            [],
        ).append(r)
    known = set(by_file)
    numeric_stats: dict[int, dict[str, Any]] = {}
    for rel, eps in sorted(by_file.items()):
        try:
            table = pq.read_table(root / rel)
        except OSError as exc:
            err.append(f"{rel}: unreadable: {exc}")
            continue
        if (
            not table.schema.equals(data_schema, check_metadata=False)
            or table.schema.metadata.get(b"huggingface") is None
        ):
            err.append(f"{rel}: schema {table.schema.names} differs from the data schema")
            continue
        index = table.column("index").to_numpy()
        for r in eps:
            e = r["episode_index"]
            sel = np.nonzero((index >= r["dataset_from_index"]) & (index < r["dataset_to_index"]))[
                0
            ]
            if len(sel) != r["length"] or (
                len(sel)
                and not np.array_equal(
                    index[sel], np.arange(r["dataset_from_index"], r["dataset_to_index"])
                )
            ):
                err.append(
                    f"episode {e}: {rel} holds {len(sel)} rows of its index range, expected {r['length']} in order"
                )
                continue
            part = table.take(sel)
            fi = part.column("frame_index").to_numpy()
            ts = part.column("timestamp").to_numpy()
            epi = part.column("episode_index").to_numpy()
            ti = part.column("task_index").to_numpy()
            if not np.array_equal(fi, np.arange(len(sel))):
                err.append(f"episode {e}: frame_index is not 0..{len(sel) - 1}")
            if not np.array_equal(ts, (fi / fps).astype(np.float32)):
                err.append(f"episode {e}: timestamp != frame_index / fps")
            if not (epi == e).all():
                err.append(f"episode {e}: rows carry episode_index {sorted(set(epi.tolist()))}")
            if ((ti < 0) | (ti >= n_tasks)).any():
                err.append(f"episode {e}: task_index outside 0..{n_tasks - 1}")
            state = np.asarray(part.column("observation.state").combine_chunks().flatten()).reshape(
                -1, 7
            )
            action = np.asarray(part.column("action").combine_chunks().flatten()).reshape(-1, 7)
            if not (np.isfinite(state).all() and np.isfinite(action).all()):
                err.append(f"episode {e}: non-finite state/action")
            numeric_stats[e] = {
                "observation.state": vector_stats(state), "action": vector_stats(action), "timestamp": vector_stats(ts),
                "frame_index": vector_stats(fi), "episode_index": vector_stats(epi), "index": vector_stats(index[sel]),
                "task_index": vector_stats(ti),
            }  # fmt: skip
            rep.frames += len(sel)
    for r in rows:
        e = r["episode_index"]
        stored = L.stats_from_row(r)
        for feat, want in numeric_stats.get(e, {}).items():
            _check_stats(f"episode {e} stats/{feat}", stored[feat], want, err)
    if rows:
        agg = aggregate_stats([L.stats_from_row(r) for r in rows])
        try:
            stats_json = json.loads((root / L.STATS_PATH).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            err.append(f"{L.STATS_PATH}: unreadable: {exc}")
            stats_json = {}
        for feat in L.FEATURE_ORDER:
            if feat not in stats_json:
                err.append(f"{L.STATS_PATH}: no {feat}")
            else:
                _check_stats(f"{L.STATS_PATH} {feat}", stats_json[feat], agg[feat], err)

    # videos
    by_video: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        rel = L.VIDEO_PATH.format(
            video_key=L.VIDEO_KEY,
            chunk_index=r[f"videos/{L.VIDEO_KEY}/chunk_index"],
            file_index=r[f"videos/{L.VIDEO_KEY}/file_index"],
        )
        by_video.setdefault(rel, []).append(r)
    known |= set(by_video) | {p.relative_to(root).as_posix() for p in ep_files}
    for top in ("data", "videos"):
        for p in sorted((root / top).rglob("*")) if (root / top).is_dir() else []:
            if p.is_file() and p.relative_to(root).as_posix() not in known:
                err.append(f"{p.relative_to(root).as_posix()}: no episode refers to this file")
    manifest_path = root / L.MANIFEST_PATH
    if manifest_path.is_file():  # our provenance record must describe the same dataset
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        if [e.get("episode_index") for e in manifest.get("episodes", [])] != [
            r["episode_index"] for r in rows
        ]:
            err.append(f"{L.MANIFEST_PATH}: its episodes do not match meta/episodes")
        if set(manifest.get("files", [])) != known:
            err.append(f"{L.MANIFEST_PATH}: its file list differs from the files the episodes use")
    if check_video:
        total = sum(r["length"] for r in rows)
        with tqdm(
            total=total, unit="frame", desc="verify", disable=not progress, leave=False
        ) as bar:
            for rel, eps in sorted(by_video.items()):
                _check_video(root, rel, eps, fps, h, w, err, bar.update)
                rep.videos_checked += 1
    return rep


def _check_video(
    root: Path,
    rel: str,
    eps: list[dict[str, Any]],
    fps: int,
    h: int,
    w: int,
    err: list[str],
    tick: Any,
) -> None:
    key = f"videos/{L.VIDEO_KEY}"
    wanted: dict[int, tuple[int, int]] = {}  # frame number in file -> (episode, row)
    queries: list[tuple[int, float]] = []
    stride = image_stride(h, w)
    for r in eps:
        e = r["episode_index"]
        start, stop = r[f"{key}/from_timestamp"], r[f"{key}/to_timestamp"]
        if abs((stop - start) - r["length"] / fps) > 1e-6:
            err.append(
                f"episode {e}: video range {start}..{stop} s does not span {r['length']} frames at {fps} fps"
            )
        ts = (np.arange(r["length"]) / fps).astype(np.float32).astype(np.float64)
        queries.extend((e, start + float(t)) for t in ts)
        for i in image_sample_indices(r["length"]):
            wanted[round((start + i / fps) * fps)] = (e, int(i))
    pts: list[float] = []
    samples: dict[int, list[np.ndarray]] = {}
    try:
        with av.open(str(root / rel)) as container:
            stream = container.streams.video[0]
            if stream.codec_context.name != "h264" or stream.codec_context.pix_fmt != "yuv420p":
                err.append(
                    f"{rel}: codec {stream.codec_context.name}/{stream.codec_context.pix_fmt}, expected h264/yuv420p"
                )
            if (stream.codec_context.height, stream.codec_context.width) != (h, w):
                err.append(
                    f"{rel}: {stream.codec_context.width}x{stream.codec_context.height}, info.json says {w}x{h}"
                )
            stream.thread_type = "AUTO"
            for n, frame in enumerate(container.decode(stream)):
                pts.append(
                    float(frame.pts * frame.time_base)
                    if frame.pts is not None and frame.time_base is not None
                    else float("nan")
                )
                if n in wanted:
                    samples.setdefault(wanted[n][0], []).append(sample_rgb(frame, stride))
                tick(1)
    except (OSError, av.error.FFmpegError) as exc:
        err.append(f"{rel}: cannot be decoded: {exc}")
        return
    frame_ts = np.asarray(pts)
    if len(frame_ts) == 0:
        err.append(f"{rel}: no frames")
        return
    order = np.sort(frame_ts)
    bad: dict[int, tuple[float, float]] = {}
    for e, q in queries:
        j = int(np.clip(np.searchsorted(order, q), 1, len(order) - 1)) if len(order) > 1 else 0
        d = min(abs(order[j] - q), abs(order[j - 1] - q)) if len(order) > 1 else abs(order[0] - q)
        if not d < TOLERANCE_S and e not in bad:
            bad[e] = (q, d)
    for e, (q, d) in bad.items():
        err.append(
            f"episode {e}: timestamp {q:.4f} s has no frame within {TOLERANCE_S} s in {rel} (nearest {d:.6f} s away)"
        )
    for r in eps:
        e = r["episode_index"]
        if e in samples:
            stored = L.stats_from_row(r)[L.VIDEO_KEY]
            got = image_stats(np.stack(samples[e]))
            if int(np.asarray(stored["count"])[0]) != int(got["count"][0]):
                err.append(
                    f"episode {e} stats/{L.VIDEO_KEY}/count {stored['count']} != {got['count']} sampled frames"
                )
            for stat in ("mean", "std", "q50"):
                if not _close(stored[stat], got[stat], rtol=0, atol=IMAGE_STATS_ATOL):
                    err.append(
                        f"episode {e} stats/{L.VIDEO_KEY}/{stat} differs from the decoded video by more than {IMAGE_STATS_ATOL}"
                    )
            if np.asarray(stored["mean"]).shape != (3, 1, 1):
                err.append(
                    f"episode {e} stats/{L.VIDEO_KEY} shape {np.asarray(stored['mean']).shape} != (3, 1, 1)"
                )
