"""The verifier's ground: lerobot's rules as constants, the report, the problem list, and
what every check reads (the dataset's files, its features, its rows). The checks build on
it: verify.py (info, tasks, episodes, data, files), verify_stats.py, verify_video.py."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from numpy.typing import NDArray

from mecharm.common.layout import EXPORT_MANIFEST
from mecharm.tools.export.stats import (
    STAT_KEYS,
)

__all__ = ["MAX_PER_KIND", "TOLERANCE_S", "Problems", "VerifierBase", "VerifyReport"]

#: LeRobotDataset's default ``tolerance_s``: a queried timestamp needs a frame this close
TOLERANCE_S = 1e-4
#: lines kept per kind of problem, then "... N more"
MAX_PER_KIND = 20
CODEBASE_VERSION = "v3.0"
INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
EPISODES_DIR = "meta/episodes"
MANIFEST_PATH = EXPORT_MANIFEST  # our provenance sidecar: optional
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


class Problems:
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


def finite(value: Any) -> TypeGuard[float | int]:
    """A JSON/parquet number that arithmetic can use: not a bool, not NaN, not infinite."""
    if not isinstance(value, float | int) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def fmt(values: Any, n: int = 7) -> str:
    flat = np.asarray(values, dtype=np.float64).ravel()
    text = ", ".join(f"{v:.6g}" for v in flat[:n])
    return f"[{text}{', ...' if flat.size > n else ''}]"


def arrow_base(dtype: str) -> pa.DataType | None:
    try:
        return pa.type_for_alias(dtype)
    except (ValueError, KeyError, TypeError):
        return None


def type_problem(t: pa.DataType, dtype: str, shape: list[int]) -> str | None:
    """Why an arrow column type cannot hold lerobot feature ``dtype``/``shape`` (None: it can)."""
    if dtype == "image":
        return None if pa.types.is_struct(t) else f"type {t}, expected an image struct"
    if dtype == "string":
        return (
            None
            if pa.types.is_string(t) or pa.types.is_large_string(t)
            else f"type {t}, expected string"
        )
    base = arrow_base(dtype)
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


def column_values(col: pa.ChunkedArray, n: int) -> NDArray[Any]:
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


def canonical_codec(name: str) -> str:
    """Codec name through FFmpeg's descriptor: libdav1d, libaom-av1, libsvtav1 -> av1."""
    for mode in ("r", "w"):
        try:
            return str(av.codec.Codec(name, mode).canonical_name)
        except Exception:  # not a decoder: try the encoder, else keep the name
            continue
    return name


class VerifierBase:
    """The dataset being checked and the helpers every check uses."""

    def __init__(
        self, root: Path, rep: VerifyReport, probs: Problems, check_video: bool, progress: bool
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

    @property
    def video_keys(self) -> list[str]:
        return [k for k, ft in self.features.items() if ft["dtype"] == "video"]

    def where(self, i: Any) -> str:
        i = int(i)
        d = self.data
        return f"{d['names'][int(d['file'][i])]} row {int(d['row'][i])} (episode {int(d['episode_index'][i])}, frame {int(d['frame_index'][i])})"

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

    def _video_rel(self, key: str, e: dict[str, Any]) -> str | None:
        return self._path(
            "video_path",
            video_key=key,
            chunk_index=e[f"videos/{key}/chunk_index"],
            file_index=e[f"videos/{key}/file_index"],
        )
