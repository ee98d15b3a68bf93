"""Check a LeRobot v3.0 dataset against what lerobot 0.4.4 needs to load it, without torch.

Driven by ``meta/info.json``'s ``features`` (any cameras, any extra columns), not by
what our exporter writes: lerobot's own datasets, and datasets after its
``lerobot-edit-dataset`` tools, must pass. Every rule, its reason in lerobot's code
and its tolerance is in docs/lerobot-verify.md. Every problem is one line naming the
file and the row; lines are grouped by kind and bounded (``MAX_PER_KIND``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from mecharm.tools.export.verify_base import (
    CODEBASE_VERSION,
    DEFAULT_FEATURES,
    EPISODE_COLUMNS,
    EPISODES_DIR,
    INFO_KEYS,
    INFO_PATH,
    MANIFEST_PATH,
    MAX_PER_KIND,
    TASKS_PATH,
    TOLERANCE_S,
    VIDEO_COLUMNS,
    Problems,
    VerifyReport,
    column_values,
    finite,
    type_problem,
)
from mecharm.tools.export.verify_stats import StatsChecks
from mecharm.tools.export.verify_video import VideoChecks

__all__ = ["MAX_PER_KIND", "TOLERANCE_S", "VerifyReport", "verify_dataset"]


def verify_dataset(root: Path, *, check_video: bool = True, progress: bool = False) -> VerifyReport:
    """Check the dataset in ``root``; every problem becomes one line of ``errors``."""
    rep = VerifyReport(Path(root))
    probs = Problems()
    try:
        _Verifier(Path(root), rep, probs, check_video, progress).run()
    except Exception as exc:  # a file we did not foresee must still give a report
        probs.add("internal", f"cannot be checked further: {type(exc).__name__}: {exc}")
    rep.errors = probs.lines()
    rep.notes = probs.notes
    rep.problems = probs.total
    return rep


class _Verifier(StatsChecks, VideoChecks):
    """The whole check, in the order lerobot reads a dataset."""

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
        if not finite(fps) or fps <= 0:
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
                if not finite(start) or not finite(stop) or start < 0 or stop < start:
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
                why = type_problem(table.schema.field(key).type, ft["dtype"], list(ft["shape"]))
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
                    values.setdefault(key, []).append(column_values(table.column(key), n))
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
