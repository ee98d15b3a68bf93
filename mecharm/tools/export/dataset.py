"""What is committed in a dataset folder made by ``mecharm export``, and its upkeep.

The manifest (``meta/mecharm_export.json``) says which run stem is which episode and which
files belong to the dataset: it is read and checked here (a damaged one is a clear
refusal), an interrupted run's leftovers (files no manifest lists) are removed, and the
small meta files lerobot reads (``info.json``, ``stats.json``, ``tasks.parquet``) are
derived from the committed episodes. One export per dataset at a time (a lock file).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from mecharm.common.fsutil import atomic_write_bytes
from mecharm.common.layout import DEFAULT_TASK
from mecharm.common.logging import get_logger
from mecharm.tools.export import layout as L
from mecharm.tools.export.config import ExportSettings
from mecharm.tools.export.recording import SOURCE_NAMES
from mecharm.tools.export.stats import aggregate_stats

__all__ = ["MANIFEST_FORMAT", "DatasetError", "DatasetState", "load_dataset_state"]

log = get_logger("export")

#: 2: episodes carry rig_id and outcome, identified by (rig_id, run_stem); data has the
#: next.* and mecharm.* columns (docs/lerobot-outcomes.md). Format 1 datasets are refused.
MANIFEST_FORMAT = 2


class DatasetError(RuntimeError):
    """The output folder cannot take this export (not ours, other fps...); nothing was written."""


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
        idx = [file_indices(p) for p in self.manifest["files"] if p.startswith(prefix)]
        return max(idx) if idx else None


def file_indices(rel: str) -> tuple[int, int]:
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


def side_sums(sums: Any) -> tuple[tuple[str, str], ...]:
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


def recover(out: Path, state: DatasetState, settings: ExportSettings) -> list[str]:
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
        write_derived(out, state.manifest, state.episode_rows)
        if not info_ok:
            removed.append("meta/info.json, stats.json, tasks.parquet (re-derived)")
    for item in removed:
        log.warning("export_recovered", removed=item, reason="leftover of an interrupted export")
    return removed


# ------------------------------------------------------------------ derived meta


def write_derived(out: Path, manifest: dict[str, Any], rows: list[dict[str, Any]]) -> None:
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
            top=top_video_size(manifest),
            fields=dataset_fields(manifest),
            extras=dataset_columns(manifest) == "all",
        ),
    )
    _write_json4(out / L.INFO_PATH, info)


def dataset_trials_of(manifest: dict[str, Any]) -> str:
    """The runtime task whose trials the dataset holds; a manifest from before tasks had
    names: pick_place."""
    return str(manifest.get("trials_of", DEFAULT_TASK))


def dataset_fields(manifest: dict[str, Any]) -> tuple[str, ...]:
    """The dataset's per-episode fields; a manifest from before tasks had names: pick_place's."""
    return tuple(manifest.get("episode_fields", L.EPISODE_FIELDS))


def dataset_columns(manifest: dict[str, Any]) -> str:
    """``all`` or ``lerobot`` (export setting ``columns``); a manifest from before: all."""
    return str(manifest.get("columns", "all"))


def dataset_action(manifest: dict[str, Any]) -> str:
    """``command`` or ``measured`` (export setting ``action``); a manifest from before: command."""
    return str(manifest.get("action", "command"))


def dataset_cameras(manifest: dict[str, Any]) -> list[str]:
    """The dataset's cameras; a manifest written before the top camera existed: side only."""
    return list(manifest.get("cameras", ["side"]))


def top_video_size(manifest: dict[str, Any]) -> tuple[int, int] | None:
    """(height, width) of the dataset's top camera video; None in a side-only dataset."""
    top = manifest.get("top_video")
    return (int(top["height"]), int(top["width"])) if top else None


def _write_json4(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=4) + "\n").encode("utf-8"))


def new_manifest(
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
        "exporter": "mecharm.tools.export",
        "fps": settings.fps,
        "robot_type": settings.robot_type,
        "chunks_size": settings.chunks_size,
        "data_files_size_in_mb": settings.data_files_size_in_mb,
        "video_files_size_in_mb": settings.video_files_size_in_mb,
        "video": {
            "key": L.VIDEO_KEY,
            "codec": "h264",
            "height": size[0],
            "width": size[1],
            "side_width": settings.side_width,
        },
        "cameras": list(settings.cameras),
        **top,
        # the runtime task whose trials it holds, and so its per-episode fields (docs/tasks.md)
        "trials_of": settings.trials_of,
        "episode_fields": list(L.episode_fields(settings.records.verdicts)),
        "columns": settings.columns,
        "action": settings.action,
        "tasks": [],
        "episodes": [],
        "files": [],
        "runs": [],
    }


@contextlib.contextmanager
def exclusive(out: Path) -> Iterator[None]:
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
