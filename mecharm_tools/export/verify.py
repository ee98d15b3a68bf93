"""Check a LeRobot v3.0 dataset against what lerobot 0.4.4 needs to load it, without torch.

Driven by ``meta/info.json``'s ``features`` (any cameras, any extra columns), not by
what our exporter writes: lerobot's own datasets, and datasets after its
``lerobot-edit-dataset`` tools, must pass. Every rule, its reason in lerobot's code
and its tolerance is in docs/lerobot-verify.md. Every problem is one line naming the
file and the row; lines are grouped by kind and bounded (``MAX_PER_KIND``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

import av
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from numpy.typing import NDArray
from tqdm import tqdm

from mecharm_tools.export.stats import (
    NUM_BINS,
    STAT_KEYS,
    aggregate_stats,
    image_sample_indices,
    image_stats,
    image_stride,
    vector_stats,
)
from mecharm_tools.export.video import sample_rgb

__all__ = ["MAX_PER_KIND", "TOLERANCE_S", "VerifyReport", "verify_dataset"]

#: LeRobotDataset's default ``tolerance_s``: a queried timestamp needs a frame this close
TOLERANCE_S = 1e-4
#: lines kept per kind of problem, then "... N more"
MAX_PER_KIND = 20
CODEBASE_VERSION = "v3.0"
INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
EPISODES_DIR = "meta/episodes"
MANIFEST_PATH = "meta/mecharm_export.json"  # our provenance sidecar: optional
#: keys lerobot's metadata reads from info.json (create_empty_dataset_info writes them all)
INFO_KEYS = ("codebase_version", "robot_type", "total_episodes", "total_frames", "total_tasks", "chunks_size",
             "data_files_size_in_mb", "video_files_size_in_mb", "fps", "splits", "data_path", "video_path", "features")  # fmt: skip
#: lerobot's DEFAULT_FEATURES: every dataset has them, with these dtypes
DEFAULT_FEATURES = {"timestamp": "float32", "frame_index": "int64", "episode_index": "int64",
                    "index": "int64", "task_index": "int64"}  # fmt: skip
#: features lerobot's tools renumber in the data but whose per-episode stats they copy as
#: they were (dataset_tools.delete_episodes, aggregate.merge): allowed a whole-number shift
REINDEXED = ("index", "episode_index", "task_index")
EPISODE_COLUMNS = ("episode_index", "tasks", "length", "data/chunk_index", "data/file_index",
                   "dataset_from_index", "dataset_to_index", "meta/episodes/chunk_index", "meta/episodes/file_index")  # fmt: skip
VIDEO_COLUMNS = ("chunk_index", "file_index", "from_timestamp", "to_timestamp")
#: decoded-video vs stored image stats (normalized 0..1): lossy codecs move pixels, the
#: extremes most (ringing), the mean least
IMAGE_ATOL = {"mean": 0.03, "std": 0.03, "min": 0.15, "max": 0.15, "q01": 0.1, "q10": 0.06,
              "q50": 0.06, "q90": 0.06, "q99": 0.1}  # fmt: skip
REQUIRED_STATS = ("min", "max", "mean", "std", "count")


@dataclass
class VerifyReport:
    path: Path
    episodes: int = 0
    frames: int = 0
    videos_checked: int = 0
    errors: list[str] = field(default_factory=list)
    #: problems found, including the ones elided from ``errors``
    problems: int = 0
    #: harmless disagreements (e.g. info.json's codec name after lerobot re-encoded)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


class _Problems:
    """Problems grouped by kind; at most MAX_PER_KIND lines each."""

    def __init__(self) -> None:
        self.by_kind: dict[str, list[str]] = {}
        self.total = 0
        self.notes: list[str] = []

    def note(self, line: str) -> None:
        """Worth knowing, harmless to lerobot: reported, not counted as a problem."""
        if len(self.notes) < MAX_PER_KIND:
            self.notes.append(line)

    def add(self, kind: str, line: str) -> None:
        self.by_kind.setdefault(kind, []).append(line)
        self.total += 1

    def lines(self) -> list[str]:
        out: list[str] = []
        for kind, lines in self.by_kind.items():
            out.extend(lines[:MAX_PER_KIND])
            if len(lines) > MAX_PER_KIND:
                out.append(f"... {len(lines) - MAX_PER_KIND} more {kind} problem(s)")
        return out


def verify_dataset(root: Path, *, check_video: bool = True, progress: bool = False) -> VerifyReport:
    """Check the dataset in ``root``; every problem becomes one line of ``errors``."""
    rep = VerifyReport(Path(root))
    probs = _Problems()
    try:
        _Verifier(Path(root), rep, probs, check_video, progress).run()
    except Exception as exc:  # a file we did not foresee must still give a report
        probs.add("internal", f"cannot be checked further: {type(exc).__name__}: {exc}")
    rep.errors = probs.lines()
    rep.notes = probs.notes
    rep.problems = probs.total
    return rep


def _finite(value: Any) -> TypeGuard[float | int]:
    """A JSON/parquet number that arithmetic can use: not a bool, not NaN, not infinite."""
    if not isinstance(value, float | int) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def _fmt(values: Any, n: int = 7) -> str:
    flat = np.asarray(values, dtype=np.float64).ravel()
    text = ", ".join(f"{v:.6g}" for v in flat[:n])
    return f"[{text}{', ...' if flat.size > n else ''}]"


def _arrow_base(dtype: str) -> pa.DataType | None:
    try:
        return pa.type_for_alias(dtype)
    except (ValueError, KeyError, TypeError):
        return None


def _type_problem(t: pa.DataType, dtype: str, shape: list[int]) -> str | None:
    """Why an arrow column type cannot hold lerobot feature ``dtype``/``shape`` (None: it can)."""
    if dtype == "image":
        return None if pa.types.is_struct(t) else f"type {t}, expected an image struct"
    if dtype == "string":
        return (
            None
            if pa.types.is_string(t) or pa.types.is_large_string(t)
            else f"type {t}, expected string"
        )
    base = _arrow_base(dtype)
    if base is None:
        return f"info.json dtype {dtype!r} is not a type lerobot can store"
    if list(shape) == [1]:
        return None if t == base else f"type {t}, expected {base} (dtype {dtype}, shape [1])"
    leaf, depth, size = t, 0, None
    while isinstance(leaf, pa.ExtensionType):
        leaf = leaf.storage_type
    while (
        pa.types.is_list(leaf) or pa.types.is_large_list(leaf) or pa.types.is_fixed_size_list(leaf)
    ):
        if depth == 0 and pa.types.is_fixed_size_list(leaf):
            size = leaf.list_size
        leaf, depth = leaf.value_type, depth + 1
    if depth != len(shape) or leaf != base:
        return (
            f"type {t}, expected {len(shape)}-d list of {base} (dtype {dtype}, shape {list(shape)})"
        )
    if size is not None and size != shape[0]:
        return f"fixed lists of {size}, expected {shape[0]} (shape {list(shape)})"
    return None


def _column_values(col: pa.ChunkedArray, n: int) -> NDArray[Any]:
    """A numeric column as (n, d): scalars become (n, 1), nested lists are flattened per row."""
    arr = col.combine_chunks()
    while isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    while (
        pa.types.is_list(arr.type)
        or pa.types.is_large_list(arr.type)
        or pa.types.is_fixed_size_list(arr.type)
    ):
        arr = arr.flatten()
    values = arr.to_numpy(zero_copy_only=False)
    return np.asarray(values).reshape(n, -1) if n else np.asarray(values).reshape(0, 1)


def _canonical_codec(name: str) -> str:
    """Codec name through FFmpeg's descriptor: libdav1d, libaom-av1, libsvtav1 -> av1."""
    for mode in ("r", "w"):
        try:
            return str(av.codec.Codec(name, mode).canonical_name)
        except Exception:  # not a decoder: try the encoder, else keep the name
            continue
    return name


class _Verifier:
    def __init__(
        self, root: Path, rep: VerifyReport, probs: _Problems, check_video: bool, progress: bool
    ) -> None:
        self.root = root
        self.rep = rep
        self.p = probs
        self.check_video = check_video
        self.progress = progress
        self.info: dict[str, Any] = {}
        self.features: dict[str, dict[str, Any]] = {}
        self.fps = 0.0
        self.task_names: list[str] = []
        self.episodes: list[dict[str, Any]] = []  # meta rows, with "_where" (file row)
        self.used_files: set[str] = set()
        self.data: dict[str, Any] = {}

    # ------------------------------------------------------------------ helpers
    def _read_json(self, rel: str) -> Any:
        path = self.root / rel
        if not path.is_file():
            self.p.add("files", f"{rel}: missing")
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            self.p.add("read", f"{rel}: not readable JSON: {exc}")
            return None

    def _read_parquet(self, rel: str) -> pa.Table | None:
        path = self.root / rel
        if not path.is_file():
            self.p.add("files", f"{rel}: missing")
            return None
        try:
            return pq.read_table(path)
        except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ... on a damaged file
            self.p.add("read", f"{rel}: not a readable parquet file: {str(exc).splitlines()[0]}")
            return None

    def _path(self, template_key: str, **kw: Any) -> str | None:
        try:
            return str(self.info[template_key]).format(**kw)
        except (KeyError, IndexError, ValueError, TypeError):  # a bad template or index
            return None

    # ------------------------------------------------------------------ run
    def run(self) -> None:
        if not self._check_info():
            return
        self._check_tasks()
        self._check_episodes()
        self._check_data()
        self._check_stats_json()
        self._check_files()
        self._check_manifest()
        if self.check_video and self.episodes and self.data:
            self._check_videos()

    def _check_info(self) -> bool:
        info = self._read_json(INFO_PATH)
        if info is None:
            return False
        if not isinstance(info, dict):
            self.p.add("info", f"{INFO_PATH}: not a JSON object")
            return False
        self.info = info
        missing = [k for k in INFO_KEYS if k not in info]
        if missing:
            self.p.add(
                "info", f"{INFO_PATH}: missing keys {missing} (lerobot's metadata reads them)"
            )
        if info.get("codebase_version") != CODEBASE_VERSION:
            self.p.add(
                "info",
                f"{INFO_PATH}: codebase_version {info.get('codebase_version')!r}, expected {CODEBASE_VERSION!r}",
            )
        fps = info.get("fps")
        if not _finite(fps) or fps <= 0:
            self.p.add("info", f"{INFO_PATH}: fps {fps!r} is not a positive finite number")
            return False
        self.fps = float(fps)
        feats = info.get("features")
        if not isinstance(feats, dict) or not all(isinstance(v, dict) for v in feats.values()):
            self.p.add("info", f"{INFO_PATH}: features is not an object of feature objects")
            return False
        good: dict[str, dict[str, Any]] = {}
        for key, ft in feats.items():
            shape = ft.get("shape")
            if (
                not isinstance(ft.get("dtype"), str)
                or not isinstance(shape, list | tuple)
                or not shape
                or not all(isinstance(s, int) and s > 0 for s in shape)
            ):
                self.p.add(
                    "info",
                    f"{INFO_PATH}: feature {key}: needs a dtype string and a shape of positive integers, has {ft}",
                )
                continue
            if "names" not in ft:
                self.p.add(
                    "info",
                    f"{INFO_PATH}: feature {key}: no 'names' (lerobot reads it; null is allowed)",
                )
            good[key] = ft
        for key, dtype in DEFAULT_FEATURES.items():
            ft = good.get(key)
            if ft is None:
                self.p.add("info", f"{INFO_PATH}: features lack lerobot's default feature {key!r}")
            elif ft["dtype"] != dtype or list(ft["shape"]) != [1]:
                self.p.add(
                    "info",
                    f"{INFO_PATH}: feature {key}: dtype {ft['dtype']} shape {ft['shape']}, lerobot's is {dtype} [1]",
                )
        self.features = good
        if self.video_keys and not isinstance(info.get("video_path"), str):
            self.p.add(
                "info", f"{INFO_PATH}: video features {self.video_keys} but no video_path template"
            )
        if not isinstance(info.get("data_path"), str):
            self.p.add("info", f"{INFO_PATH}: no data_path template")
            return False
        for key in ("total_episodes", "total_frames", "total_tasks", "chunks_size"):
            if key in info and (
                not isinstance(info[key], int) or isinstance(info[key], bool) or info[key] < 0
            ):
                self.p.add("info", f"{INFO_PATH}: {key} {info[key]!r} is not a count")
        return all(k in good for k in DEFAULT_FEATURES)  # without them no row can be placed

    @property
    def video_keys(self) -> list[str]:
        return [k for k, ft in self.features.items() if ft["dtype"] == "video"]

    def _check_tasks(self) -> None:
        table = self._read_parquet(TASKS_PATH)
        if table is None:
            return
        if "task_index" not in table.column_names:
            self.p.add("tasks", f"{TASKS_PATH}: no task_index column")
            return
        meta = table.schema.pandas_metadata or {}
        index_cols = [c for c in meta.get("index_columns", []) if isinstance(c, str)]
        name_col = next((c for c in index_cols if c in table.column_names), None)
        if name_col is None:
            self.p.add(
                "tasks",
                f"{TASKS_PATH}: the task text is not the table's index (lerobot looks tasks up by it)",
            )
            return
        names = [str(x) for x in table.column(name_col).to_pylist()]
        idx = table.column("task_index").to_pylist()
        for row, got in enumerate(idx):
            if got != row:
                self.p.add(
                    "tasks",
                    f"{TASKS_PATH} row {row}: task_index {got}, expected {row} (lerobot takes task i from row i)",
                )
        seen: set[str] = set()
        for row, name in enumerate(names):
            if name in seen:
                self.p.add("tasks", f"{TASKS_PATH} row {row}: task {name!r} appears twice")
            seen.add(name)
        self.task_names = names
        total = self.info.get("total_tasks")
        if total != len(names):
            self.p.add(
                "totals", f"{INFO_PATH}: total_tasks {total}, {TASKS_PATH} has {len(names)} rows"
            )

    # ------------------------------------------------------------------ episodes
    def _check_episodes(self) -> None:
        files = sorted((self.root / EPISODES_DIR).glob("*/*.parquet"))
        if not files:
            self.p.add("files", f"{EPISODES_DIR}: no chunk-*/file-*.parquet")
            return
        required = list(EPISODE_COLUMNS) + [
            f"videos/{k}/{c}" for k in self.video_keys for c in VIDEO_COLUMNS
        ]
        for path in files:
            rel = path.relative_to(self.root).as_posix()
            self.used_files.add(rel)
            table = self._read_parquet(rel)
            if table is None:
                continue
            missing = [c for c in required if c not in table.column_names]
            if missing:
                self.p.add("episodes", f"{rel}: missing columns {missing}")
                continue
            for row, ep in enumerate(table.to_pylist()):
                ep["_where"] = f"{rel} row {row} (episode {ep['episode_index']})"
                ep["_file"] = rel
                self.episodes.append(ep)
        self.rep.episodes = len(self.episodes)
        total = self.info.get("total_episodes")
        if total != len(self.episodes):
            self.p.add(
                "totals",
                f"{INFO_PATH}: total_episodes {total}, {EPISODES_DIR} has {len(self.episodes)} rows",
            )
        tasks = set(self.task_names)
        for pos, ep in enumerate(self.episodes):
            where = ep["_where"]
            if ep["episode_index"] != pos:
                self.p.add(
                    "episode_index",
                    f"{where}: episode_index {ep['episode_index']}, expected {pos} (lerobot takes episode i from row i)",
                )
            own = (
                f"{EPISODES_DIR}/chunk-{ep['meta/episodes/chunk_index']:03d}/file-{ep['meta/episodes/file_index']:03d}.parquet"
                if isinstance(ep["meta/episodes/chunk_index"], int)
                and isinstance(ep["meta/episodes/file_index"], int)
                else None
            )
            if own != ep["_file"]:
                self.p.add(
                    "episodes",
                    f"{where}: meta/episodes/chunk_index, file_index name {own}, but the row is in {ep['_file']}",
                )
            if not isinstance(ep["length"], int) or ep["length"] <= 0:
                self.p.add("episodes", f"{where}: length {ep['length']!r} is not a positive count")
            for t in ep["tasks"] or []:
                if self.task_names and t not in tasks:
                    self.p.add("tasks", f"{where}: task {t!r} is not in {TASKS_PATH}")
            if not ep["tasks"]:
                self.p.add("tasks", f"{where}: no tasks")
            for key in self.video_keys:
                start, stop = ep[f"videos/{key}/from_timestamp"], ep[f"videos/{key}/to_timestamp"]
                if not _finite(start) or not _finite(stop) or start < 0 or stop < start:
                    # the video check cannot place this episode's frames: skip it there
                    ep.setdefault("_bad_range", set()).add(key)
                    self.p.add(
                        "range",
                        f"{where}: videos/{key} from/to_timestamp {start!r}..{stop!r} is not a finite, non-negative, increasing range",
                    )
                elif (
                    isinstance(ep["length"], int)
                    and round(stop * self.fps) - round(start * self.fps) != ep["length"]
                ):
                    self.p.add(
                        "range",
                        f"{where}: videos/{key} {start}..{stop} s spans {round(stop * self.fps) - round(start * self.fps)} frames at {self.fps:g} fps, length is {ep['length']}",
                    )

    # ------------------------------------------------------------------ data
    def _check_data(self) -> None:
        """All data files in path order, as lerobot concatenates them: schema, indices, ranges, stats."""
        files = sorted(
            p.relative_to(self.root).as_posix() for p in (self.root / "data").glob("*/*.parquet")
        )
        users: dict[str, list[str]] = {}
        for ep in self.episodes:
            rel = self._path(
                "data_path", chunk_index=ep["data/chunk_index"], file_index=ep["data/file_index"]
            )
            if rel is None:
                self.p.add(
                    "info",
                    f"{INFO_PATH}: data_path {self.info.get('data_path')!r} cannot be filled in",
                )
                return
            ep["_data"] = rel
            self.used_files.add(rel)
            users.setdefault(rel, []).append(ep["_where"])
        for rel, wheres in users.items():
            if not (self.root / rel).is_file():
                more = f" and {len(wheres) - 1} more" if len(wheres) > 1 else ""
                self.p.add("files", f"{rel}: missing (the data of {wheres[0]}{more})")
        cols: dict[str, list[NDArray[Any]]] = {k: [] for k in ("file", "row", *DEFAULT_FEATURES)}
        values: dict[str, list[NDArray[Any]]] = {}
        names: list[str] = []
        data_feats = {k: ft for k, ft in self.features.items() if ft["dtype"] != "video"}
        for rel in files:
            table = self._read_parquet(rel)
            if table is None:
                continue
            bad = False
            for key, ft in data_feats.items():
                if key not in table.column_names:
                    self.p.add("schema", f"{rel}: no column {key!r} (a feature in {INFO_PATH})")
                    bad = True
                    continue
                why = _type_problem(table.schema.field(key).type, ft["dtype"], list(ft["shape"]))
                if why:
                    self.p.add("schema", f"{rel}: column {key!r}: {why}")
                    bad = True
                elif (
                    len(ft["shape"]) == 1
                    and ft["shape"][0] > 1
                    and not pa.types.is_fixed_size_list(table.schema.field(key).type)
                ):
                    lengths = pc.list_value_length(table.column(key)).to_numpy(zero_copy_only=False)
                    for row in np.nonzero(lengths != ft["shape"][0])[0][: MAX_PER_KIND + 1]:
                        self.p.add(
                            "schema",
                            f"{rel} row {row}: {key} has {lengths[row]} values, shape says {ft['shape'][0]}",
                        )
                        bad = True
            extra = [c for c in table.column_names if c not in data_feats]
            if extra:
                self.p.add(
                    "schema",
                    f"{rel}: columns {extra} are not features in {INFO_PATH} (lerobot's loader casts files to the features)",
                )
            if bad:
                continue
            n = table.num_rows
            names.append(rel)
            cols["file"].append(np.full(n, len(names) - 1))
            cols["row"].append(np.arange(n))
            for key in DEFAULT_FEATURES:
                cols[key].append(table.column(key).to_numpy(zero_copy_only=False))
            for key, ft in data_feats.items():
                if ft["dtype"] not in ("string", "image") and key not in DEFAULT_FEATURES:
                    values.setdefault(key, []).append(_column_values(table.column(key), n))
        if not names:
            return
        d = {k: np.concatenate(v) for k, v in cols.items()}
        d["names"] = names  # type: ignore[assignment]
        self.data = d
        vals = {k: np.concatenate(v) for k, v in values.items() if len(v) == len(names)}
        self.rep.frames = len(d["index"])
        total = self.info.get("total_frames")
        if total != len(d["index"]):
            self.p.add(
                "totals",
                f"{INFO_PATH}: total_frames {total}, the data files hold {len(d['index'])} rows",
            )
        self._check_rows(d)
        self._check_ranges(d)
        self._check_episode_stats(d, vals)

    def where(self, i: Any) -> str:
        i = int(i)
        d = self.data
        return f"{d['names'][int(d['file'][i])]} row {int(d['row'][i])} (episode {int(d['episode_index'][i])}, frame {int(d['frame_index'][i])})"

    def _check_rows(self, d: dict[str, Any]) -> None:
        idx, ep, fi, ts, ti = (
            d[k] for k in ("index", "episode_index", "frame_index", "timestamp", "task_index")
        )
        n = len(idx)
        if n == 0:
            return
        if idx[0] != 0:
            self.p.add("index", f"{self.where(0)}: index {idx[0]}, expected 0")
        for i in np.nonzero(idx[1:] != idx[:-1] + 1)[0] + 1:
            what = (
                "repeats"
                if idx[i] == idx[i - 1]
                else "gap"
                if idx[i] > idx[i - 1] + 1
                else "goes back"
            )
            self.p.add(
                "index", f"{self.where(i)}: index {idx[i]}, expected {idx[i - 1] + 1} ({what})"
            )
        if ep[0] != 0:
            self.p.add("episode_index", f"{self.where(0)}: episode_index {ep[0]}, expected 0")
        for i in np.nonzero((ep[1:] != ep[:-1]) & (ep[1:] != ep[:-1] + 1))[0] + 1:
            self.p.add(
                "episode_index",
                f"{self.where(i)}: episode_index {ep[i]} after {ep[i - 1]}, expected {ep[i - 1]} or {ep[i - 1] + 1}",
            )
        start = np.ones(n, bool)
        start[1:] = ep[1:] != ep[:-1]
        expect = np.where(start, 0, np.concatenate([[0], fi[:-1] + 1]))
        for i in np.nonzero(fi != expect)[0]:
            what = " (restart)" if fi[i] == 0 else ""
            self.p.add(
                "frame_index", f"{self.where(i)}: frame_index {fi[i]}, expected {expect[i]}{what}"
            )
        # lerobot's tolerance_s: consecutive rows 1/fps apart within it (float32 storage allowed for)
        t = ts.astype(np.float64)
        slack = TOLERANCE_S + 2 * np.spacing(np.abs(ts).astype(np.float32)).astype(np.float64)
        for i in np.nonzero(start & ((t < -slack) | (t > slack + 0.5 / self.fps)))[0]:
            self.p.add(
                "timestamp",
                f"{self.where(i)}: timestamp {t[i]:.6f} s at the episode's first row, expected 0",
            )
        step = np.diff(t)
        for i in np.nonzero(~start[1:] & (np.abs(step - 1 / self.fps) > slack[1:]))[0] + 1:
            self.p.add(
                "timestamp",
                f"{self.where(i)}: timestamp {t[i]:.6f} s is {step[i - 1]:.6f} s after the previous row, expected 1/fps = {1 / self.fps:.6f} s within {TOLERANCE_S} s",
            )
        n_tasks = len(self.task_names)
        if n_tasks:
            for i in np.nonzero((ti < 0) | (ti >= n_tasks))[0]:
                self.p.add(
                    "task_index",
                    f"{self.where(i)}: task_index {ti[i]} not in {TASKS_PATH} (0..{n_tasks - 1})",
                )

    def _check_ranges(self, d: dict[str, Any]) -> None:
        idx, ep = d["index"], d["episode_index"]
        names = d["names"]
        for e in self.episodes:
            k = e["episode_index"]
            rows = np.nonzero(ep == k)[0]
            where = e["_where"]
            if len(rows) == 0:
                self.p.add("range", f"{where}: no data row has episode_index {k}")
                continue
            lo, hi = int(idx[rows[0]]), int(idx[rows[-1]]) + 1
            e["_rows"] = rows
            if e["dataset_from_index"] != lo or e["dataset_to_index"] != hi:
                self.p.add(
                    "range",
                    f"{where}: dataset_from_index {e['dataset_from_index']}, dataset_to_index {e['dataset_to_index']}, but the data holds episode {k} at index {lo}..{hi - 1} (to {hi})",
                )
            if e["length"] != len(rows):
                self.p.add(
                    "range",
                    f"{where}: length {e['length']}, the data has {len(rows)} rows of episode {k}",
                )
            files = {names[int(f)] for f in np.unique(d["file"][rows])}
            if files != {e.get("_data")}:
                self.p.add(
                    "range",
                    f"{where}: data/chunk_index, file_index name {e.get('_data')}, episode {k}'s rows are in {sorted(files)}",
                )
        known = {e["episode_index"] for e in self.episodes}
        for k in sorted(set(np.unique(ep).tolist()) - known)[:MAX_PER_KIND]:
            i = int(np.nonzero(ep == k)[0][0])
            self.p.add(
                "range", f"{self.where(i)}: episode {k} has rows but no row in {EPISODES_DIR}"
            )

    # ------------------------------------------------------------------ stats
    def _stored(self, e: dict[str, Any], key: str) -> dict[str, NDArray[Any]] | None:
        out: dict[str, NDArray[Any]] = {}
        for stat in STAT_KEYS:
            col = f"stats/{key}/{stat}"
            if col in e and e[col] is not None:
                try:
                    out[stat] = np.asarray(e[col], dtype=np.float64)
                except (TypeError, ValueError):
                    self.p.add("stats", f"{e['_where']}: {col} is not numeric")
                    return None
        missing = [s for s in REQUIRED_STATS if s not in out]
        if missing:
            self.p.add("stats", f"{e['_where']}: no stats/{key}/{{{','.join(missing)}}}")
            return None
        return out

    def _check_episode_stats(self, d: dict[str, Any], vals: dict[str, NDArray[Any]]) -> None:
        for key, ft in self.features.items():
            if ft["dtype"] in ("string", "video", "image"):
                continue
            base = d[key].reshape(len(d[key]), -1) if key in DEFAULT_FEATURES else vals.get(key)
            if base is None:
                continue
            for e in self.episodes:
                rows = e.get("_rows")
                stored = self._stored(e, key)
                if rows is None or stored is None:
                    continue
                x = base[rows]
                want = vector_stats(x)
                self._compare_numeric(e, key, ft["dtype"], stored, want, x)

    def _compare_numeric(
        self,
        e: dict[str, Any],
        key: str,
        dtype: str,
        got: dict[str, NDArray[Any]],
        want: dict[str, NDArray[Any]],
        x: NDArray[Any],
    ) -> None:
        where = e["_where"]
        xf = x.astype(np.float64)
        eps = (
            float(np.finfo(np.float32).eps)
            if dtype in ("float32", "float16")
            else float(np.finfo(np.float64).eps)
        )
        scale = np.abs(xf).max(axis=0) if len(xf) else np.zeros(xf.shape[1])
        span = (xf.max(axis=0) - xf.min(axis=0)) if len(xf) else scale
        for stat, value in got.items():
            if value.size != want[stat].size:
                self.p.add(
                    "stats",
                    f"{where}: stats/{key}/{stat} has {value.size} values, the feature has {want[stat].size}",
                )
                return
        if int(got["count"].ravel()[0]) != len(x):
            self.p.add(
                "stats",
                f"{where}: stats/{key}/count {int(got['count'].ravel()[0])}, the episode has {len(x)} rows",
            )
            return
        loc_tol = 64 * eps * scale + 1e-9
        tol = {s: loc_tol for s in ("min", "max", "mean")} | {
            q: loc_tol + 2 * span / NUM_BINS for q in STAT_KEYS if q.startswith("q")
        }
        shift = 0.0
        if key in REINDEXED:  # lerobot's tools copy these per-episode stats from before renumbering
            d = float(np.round(got["min"].ravel()[0] - want["min"].ravel()[0]))
            if np.allclose(got["min"].ravel(), want["min"].ravel() + d, atol=1e-6):
                shift = d
        for stat in ("min", "max", "mean", *(q for q in STAT_KEYS if q.startswith("q"))):
            if stat not in got:
                continue
            g, w = got[stat].ravel(), want[stat].ravel() + shift
            if not (np.abs(g - w) <= tol[stat]).all():
                self.p.add(
                    "stats",
                    f"{where}: stats/{key}/{stat} {_fmt(g)}, recomputed from the data {_fmt(w)}",
                )
        g, v = got["std"].ravel(), want["std"].ravel() ** 2
        if not (
            np.abs(g**2 - v) <= 64 * eps * scale**2 + 1e-12
        ).all():  # float32 E[x²]-E[x]² cancels
            self.p.add(
                "stats",
                f"{where}: stats/{key}/std {_fmt(g)}, recomputed from the data {_fmt(np.sqrt(v))}",
            )

    def _check_stats_json(self) -> None:
        stats = self._read_json(STATS_PATH)
        if stats is None or not self.episodes:
            return
        if not isinstance(stats, dict):
            self.p.add("stats.json", f"{STATS_PATH}: not a JSON object")
            return
        for key, ft in self.features.items():
            if ft["dtype"] == "string":
                continue
            if key not in stats or not isinstance(stats[key], dict):
                self.p.add("stats.json", f"{STATS_PATH}: no stats for feature {key!r}")
                continue
            per_ep: list[dict[str, Any]] = []
            for e in self.episodes:
                s = {
                    stat: np.asarray(e[f"stats/{key}/{stat}"], dtype=np.float64)
                    for stat in STAT_KEYS
                    if e.get(f"stats/{key}/{stat}") is not None
                }
                if any(k not in s for k in STAT_KEYS):
                    break
                per_ep.append({key: s})
            else:
                try:
                    agg = aggregate_stats(per_ep)[key]
                except (ValueError, KeyError):
                    self.p.add(
                        "stats.json",
                        f"{EPISODES_DIR}: the stats/{key} of the episodes do not have one shape",
                    )
                    continue
                for stat in STAT_KEYS:
                    try:
                        got = np.asarray(stats[key].get(stat), dtype=np.float64)
                    except (TypeError, ValueError):
                        got = np.asarray([np.nan])
                    want = np.asarray(agg[stat], dtype=np.float64)
                    if got.size != want.size or not np.allclose(
                        got.ravel(), want.ravel(), rtol=1e-6, atol=1e-9
                    ):
                        self.p.add(
                            "stats.json",
                            f"{STATS_PATH}: {key}/{stat} {_fmt(got)}, the episodes' stats aggregate to {_fmt(want)}",
                        )

    # ------------------------------------------------------------------ files
    def _video_rel(self, key: str, e: dict[str, Any]) -> str | None:
        return self._path(
            "video_path",
            video_key=key,
            chunk_index=e[f"videos/{key}/chunk_index"],
            file_index=e[f"videos/{key}/file_index"],
        )

    def _check_files(self) -> None:
        for key in self.video_keys:
            for e in self.episodes:
                rel = self._video_rel(key, e)
                if rel is not None:
                    self.used_files.add(rel)
                    if not (self.root / rel).is_file():
                        self.p.add("files", f"{rel}: missing (videos/{key} of {e['_where']})")
        for top in ("data", "videos"):
            base = self.root / top
            for path in sorted(base.rglob("*")) if base.is_dir() else []:
                rel = path.relative_to(self.root).as_posix()
                if path.is_file() and rel not in self.used_files:
                    note = (
                        " (lerobot's loader reads every data file: its rows would join the dataset)"
                        if top == "data"
                        else ""
                    )
                    self.p.add("files", f"{rel}: no episode refers to this file{note}")

    def _check_manifest(self) -> None:
        if not (self.root / MANIFEST_PATH).is_file():
            return
        manifest = self._read_json(MANIFEST_PATH)
        if not isinstance(manifest, dict):
            if manifest is not None:
                self.p.add("manifest", f"{MANIFEST_PATH}: not a JSON object")
            return
        eps = manifest.get("episodes", [])
        listed = (
            [m.get("episode_index") if isinstance(m, dict) else None for m in eps]
            if isinstance(eps, list)
            else None
        )
        if listed != [e["episode_index"] for e in self.episodes]:
            self.p.add(
                "manifest",
                f"{MANIFEST_PATH}: its episodes do not match {EPISODES_DIR} ({listed} vs {[e['episode_index'] for e in self.episodes]})",
            )
        files = manifest.get("files")
        if files is not None and not (
            isinstance(files, list) and all(isinstance(f, str) for f in files)
        ):
            self.p.add("manifest", f"{MANIFEST_PATH}: files is not a list of paths")
        elif files is not None and set(files) != self.used_files:
            self.p.add(
                "manifest",
                f"{MANIFEST_PATH}: its file list differs from the files the episodes use ({sorted(set(files) ^ self.used_files)[:5]})",
            )

    # ------------------------------------------------------------------ videos
    def _check_videos(self) -> None:
        d = self.data
        total = len(d["index"]) * len(self.video_keys)
        with tqdm(
            total=total, unit="frame", desc="verify", disable=not self.progress, leave=False
        ) as bar:
            for key in self.video_keys:
                by_file: dict[str, list[dict[str, Any]]] = {}
                for e in self.episodes:
                    rel = self._video_rel(key, e)
                    if (
                        rel is not None
                        and "_rows" in e
                        and key not in e.get("_bad_range", ())
                        and (self.root / rel).is_file()
                    ):
                        by_file.setdefault(rel, []).append(e)
                for rel, eps in sorted(by_file.items()):
                    self._check_video(key, rel, eps, bar.update)
                    self.rep.videos_checked += 1

    def _frame_hw(self, key: str) -> tuple[int, int]:
        ft = self.features[key]
        names = ft.get("names") or ["height", "width", "channels"]
        shape = list(ft["shape"])
        try:
            return shape[list(names).index("height")], shape[list(names).index("width")]
        except (ValueError, IndexError):
            return shape[0], shape[1]

    def _check_video(
        self, key: str, rel: str, eps: list[dict[str, Any]], tick: Callable[[int], Any]
    ) -> None:
        d = self.data
        h, w = self._frame_hw(key)
        vinfo = self.features[key].get("info") or {}
        # image-stats samples: lerobot's rows, as times in this file
        sample_t: list[float] = []
        sample_of: list[tuple[int, int]] = []
        for n, e in enumerate(eps):
            for i in image_sample_indices(len(e["_rows"])):
                sample_of.append((n, int(i)))
                sample_t.append(
                    e[f"videos/{key}/from_timestamp"] + float(d["timestamp"][e["_rows"][i]])
                )
        order = np.argsort(sample_t)
        st = np.asarray(sample_t)[order]
        stride = image_stride(h, w)
        pts: list[float] = []
        kept: dict[int, NDArray[np.uint8]] = {}
        try:
            with av.open(str(self.root / rel)) as container:
                if not container.streams.video:
                    self.p.add("video", f"{rel}: no video stream")
                    return
                stream = container.streams.video[0]
                name = _canonical_codec(stream.codec_context.name)
                want_codec = vinfo.get("video.codec")
                # lerobot decodes by probing the file, and its delete_episodes re-encodes to AV1
                # without updating info.json: a disagreement is a note, not a problem
                if want_codec is not None and _canonical_codec(str(want_codec)) != name:
                    self.p.note(
                        f"{rel}: codec {name} (decoder {stream.codec_context.name}), {INFO_PATH} features.{key}.info says {want_codec}"
                    )
                want_fmt = vinfo.get("video.pix_fmt")
                if want_fmt is not None and stream.codec_context.pix_fmt not in (None, want_fmt):
                    self.p.note(
                        f"{rel}: pix_fmt {stream.codec_context.pix_fmt}, {INFO_PATH} features.{key}.info says {want_fmt}"
                    )
                if (stream.codec_context.height, stream.codec_context.width) != (h, w):
                    self.p.add(
                        "video",
                        f"{rel}: {stream.codec_context.width}x{stream.codec_context.height}, {INFO_PATH} features.{key}.shape says {w}x{h}",
                    )
                stream.thread_type = "AUTO"
                try:
                    for n, frame in enumerate(container.decode(stream)):
                        t = (
                            float(frame.pts * frame.time_base)
                            if frame.pts is not None and frame.time_base is not None
                            else float("nan")
                        )
                        pts.append(t)
                        j = int(np.searchsorted(st, t))
                        near = any(
                            0 <= k < len(st) and abs(st[k] - t) <= 0.5 / self.fps
                            for k in (j - 1, j)
                        )
                        if near:
                            kept[n] = sample_rgb(frame, stride)
                        tick(1)
                except Exception as exc:  # a damaged stream: judge the frames that did decode
                    self.p.add(
                        "video",
                        f"{rel}: decoding stops after frame {len(pts)}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                    )
        except Exception as exc:
            self.p.add(
                "video",
                f"{rel}: cannot be opened as video: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
            )
            return
        if not pts:
            self.p.add("video", f"{rel}: no decodable frame")
            return
        frame_t = np.asarray(pts)
        by_time = np.argsort(frame_t, kind="stable")
        sorted32 = frame_t[by_time].astype(np.float32)
        last = float(frame_t[by_time[-1]])
        tol32 = np.float32(TOLERANCE_S)
        for e in eps:
            rows = e["_rows"]
            # lerobot's query: from_timestamp + row timestamp, compared in float32 (torch tensors)
            start = float(e[f"videos/{key}/from_timestamp"])
            q = (start + d["timestamp"][rows].astype(np.float64)).astype(np.float32)
            nxt = (
                np.clip(np.searchsorted(sorted32, q), 1, max(1, len(sorted32) - 1))
                if len(sorted32) > 1
                else np.zeros(len(q), int)
            )
            dist = (
                np.minimum(np.abs(sorted32[nxt] - q), np.abs(sorted32[nxt - 1] - q))
                if len(sorted32) > 1
                else np.abs(sorted32[0] - q)
            )
            # torchcodec (lerobot's default decoder) takes frame round(ts * fps) by position
            pos = np.rint(q.astype(np.float64) * self.fps).astype(np.int64)
            for r in np.nonzero(~(dist < tol32))[0]:
                i = int(rows[r])
                if q[r] > last + TOLERANCE_S:
                    self.p.add(
                        "frames",
                        f"{rel}: {self.where(i)}: timestamp {float(q[r]):.4f} s is past the video's end (last frame at {last:.4f} s)",
                    )
                else:
                    self.p.add(
                        "frames",
                        f"{rel}: {self.where(i)}: no frame within {TOLERANCE_S} s of {float(q[r]):.4f} s (nearest {float(dist[r]):.6f} s away)",
                    )
            ok = dist < tol32
            inside = (pos >= 0) & (pos < len(sorted32))
            for r in np.nonzero(
                ok & (~inside | (np.abs(sorted32[np.clip(pos, 0, len(sorted32) - 1)] - q) >= tol32))
            )[0]:
                i = int(rows[r])
                self.p.add(
                    "frames",
                    f"{rel}: {self.where(i)}: frame #{pos[r]} (the one lerobot's torchcodec decoder takes for {float(q[r]):.4f} s) is not within {TOLERANCE_S} s of it",
                )
        self._check_image_stats(
            key, rel, eps, frame_t, by_time, kept, sample_of, np.asarray(sample_t)
        )

    def _check_image_stats(
        self, key: str, rel: str, eps: list[dict[str, Any]], frame_t: NDArray[np.float64], by_time: NDArray[np.int64],
        kept: dict[int, NDArray[np.uint8]], sample_of: list[tuple[int, int]], sample_t: NDArray[np.float64],
    ) -> None:  # fmt: skip
        images: dict[int, list[NDArray[np.uint8]]] = {}
        ft = frame_t[by_time]
        for (n, _i), t in zip(sample_of, sample_t, strict=True):
            j = int(np.clip(np.searchsorted(ft, t), 0, len(ft) - 1))
            if j > 0 and abs(ft[j - 1] - t) < abs(ft[j] - t):
                j -= 1
            frame_no = int(by_time[j])
            if frame_no in kept and abs(ft[j] - t) <= 0.5 / self.fps:  # else: a timestamp problem
                images.setdefault(n, []).append(kept[frame_no])
        for n, e in enumerate(eps):
            stored = self._stored(e, key)
            if stored is None:
                continue
            where = e["_where"]
            bad_shape = [s for s, v in stored.items() if s != "count" and v.size != 3]
            if bad_shape:
                self.p.add(
                    "stats",
                    f"{where}: stats/{key}/{bad_shape[0]} has {stored[bad_shape[0]].size} values, expected 3 (per channel, shape (3, 1, 1))",
                )
                continue
            count = int(stored["count"].ravel()[0])
            if not 1 <= count <= e["length"]:
                self.p.add(
                    "stats",
                    f"{where}: stats/{key}/count {count}, expected 1..{e['length']} sampled frames",
                )
            if n not in images or len(images[n]) < len(image_sample_indices(e["length"])):
                continue  # frames missing: reported by the timestamp check
            imgs = np.stack(images[n])
            got = image_stats(imgs)
            for stat, atol in IMAGE_ATOL.items():
                if stat == "std" or stat not in stored:
                    continue
                if not (np.abs(stored[stat].ravel() - got[stat].ravel()) <= atol).all():
                    self.p.add(
                        "stats",
                        f"{where}: stats/{key}/{stat} {_fmt(stored[stat])}, the decoded video gives {_fmt(got[stat])} (allowed {atol})",
                    )
            self._check_image_std(where, key, stored, got, imgs)

    def _check_image_std(
        self,
        where: str,
        key: str,
        stored: dict[str, NDArray[Any]],
        got: dict[str, NDArray[Any]],
        imgs: NDArray[np.uint8],
    ) -> None:
        """The true std, or what lerobot 0.4.4 writes: it squares uint8 pixels in uint8 (mod 256)."""
        s, m = stored["std"].ravel(), stored["mean"].ravel()
        true_ok = np.abs(s - got["std"].ravel()) <= IMAGE_ATOL["std"]
        # E[x² mod 256] <= 255, so a wrapped std obeys (255 s)² + (255 m)² <= 255
        bound_ok = (255 * s) ** 2 + (255 * m) ** 2 <= 255 * (1 + 0.05) + 1
        if (true_ok | bound_ok).all():
            return
        flat = imgs.reshape(-1, imgs.shape[-1])
        levels = np.arange(256, dtype=np.float64)
        counts = [np.bincount(flat[:, c], minlength=256) for c in range(flat.shape[1])]
        wrapped = (
            np.asarray(
                [
                    np.sqrt(
                        max(
                            0.0,
                            (n * (levels**2 % 256)).sum() / n.sum()
                            - ((n * levels).sum() / n.sum()) ** 2,
                        )
                    )
                    for n in counts
                ]
            )
            / 255.0
        )
        wrap_ok = np.abs(s - wrapped) <= IMAGE_ATOL["std"]
        if not (true_ok | wrap_ok | bound_ok).all():
            self.p.add(
                "stats",
                f"{where}: stats/{key}/std {_fmt(s)}, the decoded video gives {_fmt(got['std'])} (or lerobot's uint8-wrapped {_fmt(wrapped)})",
            )
