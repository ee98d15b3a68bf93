"""LeRobot v3.0 on-disk layout: paths, parquet schemas, info.json (as lerobot 0.4.4 writes them).

Checked against a dataset written by lerobot 0.4.4 itself (see docs/lerobot.md):
the same file names, column names and types, column order, schema metadata and
info.json keys.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from mecharm.common.layout import EXPORT_MANIFEST
from mecharm.runtime.control import GRIPPER_KEY, JOINT_KEYS
from mecharm.tools.export.stats import STAT_KEYS, Stats

__all__ = [
    "CODEBASE_VERSION",
    "DATA_PATH",
    "EPISODES_PATH",
    "EPISODE_COLUMNS",
    "EPISODE_FEATURES",
    "EPISODE_FIELDS",
    "FEATURE_ORDER",
    "INDEX_FEATURES",
    "INFO_PATH",
    "JOINT_NAMES",
    "MANIFEST_PATH",
    "OUTCOME_FEATURES",
    "STATS_PATH",
    "SUCCESS_COLUMN",
    "TASKS_PATH",
    "TOP_VIDEO_KEY",
    "VIDEO_KEY",
    "VIDEO_KEYS",
    "VIDEO_PATH",
    "camera_keys",
    "data_schema",
    "episode_columns",
    "episode_features",
    "episode_fields",
    "episodes_schema",
    "feature_order",
    "features",
    "fields_of_features",
    "info_json",
    "next_file",
    "stats_from_row",
    "stats_to_json",
    "tasks_table",
]

CODEBASE_VERSION = "v3.0"
VIDEO_KEY = "observation.images.side"
#: the top camera (docs/lerobot-top-camera.md); absent from side-only datasets
TOP_VIDEO_KEY = "observation.images.top"
#: the video feature of each camera name (export setting ``cameras``), in feature order
VIDEO_KEYS = {"side": VIDEO_KEY, "top": TOP_VIDEO_KEY}
#: the state's and the action's names: lerobot's ``<motor>.pos``, exactly the features of the
#: mecharm270 robot (docs/lerobot-robot.md), so a ``lerobot-record`` episode of the robot and
#: an exported trial are one dataset family and ``lerobot-replay`` maps an export's actions
JOINT_NAMES = [*JOINT_KEYS, GRIPPER_KEY]
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
#: our provenance sidecar (lerobot ignores unknown files in meta/)
MANIFEST_PATH = EXPORT_MANIFEST
INDEX_FEATURES = ("timestamp", "frame_index", "episode_index", "index", "task_index")
#: the trial's outcome per frame, lerobot's simulation-dataset convention (docs/lerobot-outcomes.md):
#: next.reward float32, next.done bool, next.success bool
OUTCOME_FEATURES = ("next.reward", "next.done", "next.success")
_OUTCOME_DTYPES = {"next.reward": "float32", "next.done": "bool", "next.success": "bool"}
#: per-episode fields, written twice (docs/lerobot-outcomes.md): as constant per-frame string
#: features ``mecharm.<field>`` (every lerobot tool keeps data columns) and as meta/episodes
#: columns ``mecharm/<field>`` plus ``mecharm/success`` (what lerobot's loader exposes per episode)
#: The verdicts are the runtime task's (its ``TaskRecords.verdicts``, docs/tasks.md):
#: ``episode_fields`` gives a task's list; the constants below are the default task's.


def episode_fields(verdicts: Sequence[str]) -> tuple[str, ...]:
    """The per-episode fields of a dataset of a task with these verdict columns."""
    return ("run_stem", "rig_id", *verdicts, "judge", "recording_status")


def episode_features(fields: Sequence[str]) -> tuple[str, ...]:
    return tuple(f"mecharm.{k}" for k in fields)


SUCCESS_COLUMN = "mecharm/success"


def episode_columns(fields: Sequence[str]) -> tuple[str, ...]:
    return (*(f"mecharm/{k}" for k in fields), SUCCESS_COLUMN)


def fields_of_features(feats: Mapping[str, Any]) -> tuple[str, ...]:
    """A dataset's per-episode fields, from its info.json features (``mecharm.<field>``)."""
    return tuple(k.removeprefix("mecharm.") for k in feats if k.startswith("mecharm."))


EPISODE_FIELDS = episode_fields(("pick_verdict", "place_verdict"))  # pick_place's (the default)
EPISODE_FEATURES = episode_features(EPISODE_FIELDS)
EPISODE_COLUMNS = episode_columns(EPISODE_FIELDS)
#: features with statistics, in info.json order (lerobot: the dataset's own features in the
#: order given, then its default index features; string features have no statistics)
FEATURE_ORDER = ("observation.state", "action", VIDEO_KEY, *OUTCOME_FEATURES, *INDEX_FEATURES)


def camera_keys(cameras: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The video features of ``cameras`` (names of the export setting), in feature order."""
    return tuple(key for name, key in VIDEO_KEYS.items() if name in cameras)


def feature_order(
    video_keys: tuple[str, ...] = (VIDEO_KEY,), extras: bool = True
) -> tuple[str, ...]:
    """The features with statistics, in lerobot's order, for a dataset of these cameras
    (``FEATURE_ORDER`` for the side camera alone); ``extras=False``: a dataset with only
    lerobot's own columns (export setting ``columns: lerobot``), without next.*."""
    outcomes = OUTCOME_FEATURES if extras else ()
    return ("observation.state", "action", *video_keys, *outcomes, *INDEX_FEATURES)


def _video_feature(height: int, width: int, fps: int, codec: str) -> dict[str, Any]:
    """One camera's entry in info.json's features, with lerobot's ``info`` block."""
    return {
        "dtype": "video",
        "shape": [height, width, 3],
        "names": ["height", "width", "channels"],
        "info": {
            "video.height": height,
            "video.width": width,
            "video.codec": codec,
            "video.pix_fmt": "yuv420p",
            "video.is_depth_map": False,
            "video.fps": fps,
            "video.channels": 3,
            "has_audio": False,
        },
    }


def features(
    height: int,
    width: int,
    fps: int,
    codec: str = "h264",
    *,
    top: tuple[int, int] | None = None,
    fields: Sequence[str] = EPISODE_FIELDS,
    extras: bool = True,
) -> dict[str, Any]:
    """The ``features`` block of info.json, in lerobot's order; ``top`` = (height, width)
    of the top camera's video in a two-camera dataset; ``fields`` the per-episode fields;
    ``extras=False``: lerobot's own features only (no next.*, no mecharm.*)."""
    vec = {"dtype": "float32", "shape": [len(JOINT_NAMES)], "names": list(JOINT_NAMES)}
    scalar = {"shape": [1], "names": None}
    videos = {VIDEO_KEY: _video_feature(height, width, fps, codec)}
    if top is not None:
        videos[TOP_VIDEO_KEY] = _video_feature(top[0], top[1], fps, codec)
    return {
        "observation.state": dict(vec, names=list(JOINT_NAMES)),
        "action": dict(vec, names=list(JOINT_NAMES)),
        **videos,
        **{k: {"dtype": _OUTCOME_DTYPES[k], **scalar} for k in OUTCOME_FEATURES if extras},
        **{k: {"dtype": "string", **scalar} for k in episode_features(fields) if extras},
        "timestamp": {"dtype": "float32", **scalar},
        "frame_index": {"dtype": "int64", **scalar},
        "episode_index": {"dtype": "int64", **scalar},
        "index": {"dtype": "int64", **scalar},
        "task_index": {"dtype": "int64", **scalar},
    }


def info_json(
    *,
    robot_type: str,
    fps: int,
    total_episodes: int,
    total_frames: int,
    total_tasks: int,
    chunks_size: int,
    data_files_size_in_mb: int,
    video_files_size_in_mb: int,
    feats: dict[str, Any],
) -> dict[str, Any]:
    return {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": robot_type,
        "total_episodes": total_episodes,
        "total_frames": total_frames,
        "total_tasks": total_tasks,
        "chunks_size": chunks_size,
        "data_files_size_in_mb": data_files_size_in_mb,
        "video_files_size_in_mb": video_files_size_in_mb,
        "fps": fps,
        "splits": {"train": f"0:{total_episodes}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH,
        "features": feats,
    }


def next_file(chunk: int, file: int, chunks_size: int) -> tuple[int, int]:
    """The (chunk, file) after this one: files 0..chunks_size-1 per chunk (lerobot)."""
    return (chunk + 1, 0) if file >= chunks_size - 1 else (chunk, file + 1)


def _list(t: pa.DataType, size: int = -1) -> pa.DataType:
    """A list type whose child is named ``element``, as parquet files read back."""
    return pa.list_(pa.field("element", t), size)


def data_schema(episode: Sequence[str] = EPISODE_FIELDS, extras: bool = True) -> pa.Schema:
    """Data file schema with the ``huggingface`` metadata that `datasets` reads features
    from; ``episode``: the per-episode fields; ``extras=False``: no next.*, no mecharm.*."""
    vec = _list(pa.float32(), len(JOINT_NAMES))
    if not extras:
        episode = ()
    fields = [
        pa.field("observation.state", vec),
        pa.field("action", vec),
        *(pa.field(k, pa.type_for_alias(_OUTCOME_DTYPES[k])) for k in OUTCOME_FEATURES if extras),
        *(pa.field(k, pa.string()) for k in episode_features(episode)),
        pa.field("timestamp", pa.float32()),
        pa.field("frame_index", pa.int64()),
        pa.field("episode_index", pa.int64()),
        pa.field("index", pa.int64()),
        pa.field("task_index", pa.int64()),
    ]
    value = {
        "feature": {"dtype": "float32", "_type": "Value"},
        "length": len(JOINT_NAMES),
        "_type": "List",
    }
    hf = {
        "info": {
            "features": {
                "observation.state": value,
                "action": value,
                **{
                    k: {"dtype": _OUTCOME_DTYPES[k], "_type": "Value"}
                    for k in OUTCOME_FEATURES
                    if extras
                },
                **{k: {"dtype": "string", "_type": "Value"} for k in episode_features(episode)},
                **{
                    k: {"dtype": "float32" if k == "timestamp" else "int64", "_type": "Value"}
                    for k in INDEX_FEATURES
                },
            }
        }
    }
    return pa.schema(fields, metadata={"huggingface": json.dumps(hf)})


def _stat_type(feature: str, stat: str) -> pa.DataType:
    if feature in VIDEO_KEYS.values() and stat != "count":
        return _list(_list(_list(pa.float64())))
    if stat in ("min", "max") and _OUTCOME_DTYPES.get(feature) == "bool":
        return _list(pa.bool_())  # lerobot keeps a bool column's min/max bool
    if stat == "count" or (
        stat in ("min", "max") and feature in INDEX_FEATURES and feature != "timestamp"
    ):
        return _list(pa.int64())
    return _list(pa.float64())


def episodes_schema(
    video_keys: tuple[str, ...] = (VIDEO_KEY,),
    episode: Sequence[str] = EPISODE_FIELDS,
    extras: bool = True,
) -> pa.Schema:
    """meta/episodes schema: index ranges, each camera's video range, per-episode stats, own
    location, then our per-episode fields (extra columns lerobot's loader keeps and its merge
    carries; none when ``extras=False``)."""
    fields = [
        pa.field("episode_index", pa.int64()),
        pa.field("tasks", _list(pa.string())),
        pa.field("length", pa.int64()),
        pa.field("data/chunk_index", pa.int64()),
        pa.field("data/file_index", pa.int64()),
        pa.field("dataset_from_index", pa.int64()),
        pa.field("dataset_to_index", pa.int64()),
    ]
    for key in video_keys:
        fields += [
            pa.field(f"videos/{key}/chunk_index", pa.int64()),
            pa.field(f"videos/{key}/file_index", pa.int64()),
            pa.field(f"videos/{key}/from_timestamp", pa.float64()),
            pa.field(f"videos/{key}/to_timestamp", pa.float64()),
        ]
    for feat in feature_order(video_keys, extras):
        fields.extend(
            pa.field(f"stats/{feat}/{stat}", _stat_type(feat, stat)) for stat in STAT_KEYS
        )
    fields += [
        pa.field("meta/episodes/chunk_index", pa.int64()),
        pa.field("meta/episodes/file_index", pa.int64()),
    ]
    if extras:
        fields += [
            *(pa.field(c, pa.string()) for c in episode_columns(episode) if c != SUCCESS_COLUMN),
            pa.field(SUCCESS_COLUMN, pa.bool_()),
        ]
    return pa.schema(fields)


def stats_from_row(row: dict[str, Any]) -> dict[str, Stats]:
    """Per-episode stats back from an episodes-meta row (``stats/<feature>/<stat>``), for
    the features the row has: its cameras, and no next.* in a dataset lerobot wrote."""
    out: dict[str, Stats] = {}
    for feat in feature_order(tuple(VIDEO_KEYS.values())):
        if f"stats/{feat}/min" in row:
            out[feat] = {stat: np.asarray(row[f"stats/{feat}/{stat}"]) for stat in STAT_KEYS}
    return out


def _jsonable(v: np.ndarray) -> Any:
    return v.tolist()


def stats_to_json(stats: dict[str, Stats]) -> dict[str, Any]:
    return {feat: {k: _jsonable(np.asarray(v)) for k, v in s.items()} for feat, s in stats.items()}


def tasks_table(tasks: list[str]) -> pa.Table:
    """meta/tasks.parquet as pandas writes it: the task string is the (named-less) index."""
    pandas_meta = {
        "index_columns": ["__index_level_0__"],
        "column_indexes": [
            {
                "name": None,
                "field_name": None,
                "pandas_type": "unicode",
                "numpy_type": "str",
                "metadata": {"encoding": "UTF-8"},
            }
        ],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {
                "name": None,
                "field_name": "__index_level_0__",
                "pandas_type": "object",
                "numpy_type": "str",
                "metadata": None,
            },
        ],
        "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "3.1.1",
    }
    schema = pa.schema(
        [pa.field("task_index", pa.int64()), pa.field("__index_level_0__", pa.large_string())],
        metadata={"pandas": json.dumps(pandas_meta)},
    )
    return pa.table(
        {"task_index": list(range(len(tasks))), "__index_level_0__": tasks}, schema=schema
    )


def rel(path: Path, root: Path) -> str:
    return Path(path).relative_to(root).as_posix()
