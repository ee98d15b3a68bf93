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

import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from mecharm.common.fsutil import atomic_write_json
from mecharm.common.logging import get_logger
from mecharm.tools.export import layout as L
from mecharm.tools.export.config import ExportSettings
from mecharm.tools.export.dataset import (
    DatasetError,
    dataset_action,
    dataset_cameras,
    dataset_columns,
    dataset_trials_of,
    exclusive,
    load_dataset_state,
    new_manifest,
    recover,
    side_sums,
    top_video_size,
    write_derived,
)
from mecharm.tools.export.outcomes import EpisodeInfo, default_rig_id, episode_info
from mecharm.tools.export.recording import source_checksums
from mecharm.tools.export.selection import (
    Candidate,
    Skipped,
    parse_select,
    read_ledger,
    resolve_crashed,
    select_trials,
    with_crashed,
)
from mecharm.tools.export.video import scaled_size
from mecharm.tools.export.writer import (
    EpisodeWriter,
    crash_note,
    fsync_file,
    prepare,
    top_provenance,
)

__all__ = [
    "DatasetError",
    "ExportReport",
    "ExportedEpisode",
    "export_lerobot",
    "load_dataset_state",
]

log = get_logger("export")


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


def _settings_snapshot(s: ExportSettings) -> dict[str, Any]:
    keys = ("fps", "trials_of", "task", "select", "rig_id", "max_interp_gap_s", "gripper_settle_s",
            "max_frame_offset_s", "cameras", "top_width", "side_width", "columns", "action", "preset", "crf", "gop")  # fmt: skip
    return {k: getattr(s, k) for k in keys} | {"task": s.task_words}


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
    with exclusive(Path(out)):
        return _export(Path(root), Path(out), settings, runs, dry_run)


def _export(
    root: Path, out: Path, settings: ExportSettings, runs: set[str] | None, dry_run: bool
) -> ExportReport:
    t_start = time.perf_counter()
    root, out = Path(root), Path(out)
    report = ExportReport(out)
    records = settings.records  # the runtime task whose trials these are (docs/tasks.md)
    task = settings.trials_of
    conditions = parse_select(settings.select, records)
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
        if dataset_trials_of(m) != task:
            raise DatasetError(
                f"{out} holds trials of task {dataset_trials_of(m)}; cannot add trials of "
                f"{task} (their outcomes are other columns): export them into a new folder"
            )
        if dataset_cameras(m) != list(settings.cameras):
            raise DatasetError(
                f"{out} was first exported with cameras {','.join(dataset_cameras(m))}; cannot add "
                f"episodes with --cameras {','.join(settings.cameras)} (pass --cameras "
                f"{','.join(dataset_cameras(m))}, or export into a new folder)"
            )
        top_m = m.get("top_video")
        if top_m and int(top_m.get("top_width", settings.top_width)) != settings.top_width:
            raise DatasetError(
                f"{out} was first exported with top_width {top_m['top_width']} (top video "
                f"{top_m['width']}x{top_m['height']}); cannot add episodes at top_width "
                f"{settings.top_width} (pass --top-width {top_m['top_width']}, or a new folder)"
            )
        side_m = m.get("video") or {}
        if int(side_m.get("side_width", 0)) != settings.side_width:
            raise DatasetError(
                f"{out} was first exported with side_width {side_m.get('side_width', 0)} (side "
                f"video {side_m.get('width')}x{side_m.get('height')}); cannot add episodes at "
                f"side_width {settings.side_width} (pass --side-width "
                f"{side_m.get('side_width', 0)}, or a new folder)"
            )
        if dataset_columns(m) != settings.columns:
            raise DatasetError(
                f"{out} was first exported with --columns {dataset_columns(m)}; cannot add "
                f"episodes with --columns {settings.columns} (their data files would have "
                f"other columns): pass --columns {dataset_columns(m)}, or a new folder"
            )
        if dataset_action(m) != settings.action:
            raise DatasetError(
                f"{out} was first exported with --action {dataset_action(m)}; cannot add "
                f"episodes with --action {settings.action} (one dataset, one meaning of its "
                f"actions): pass --action {dataset_action(m)}, or a new folder"
            )
        if not dry_run:
            report.recovered = recover(out, state, settings)
    if state is None and not dry_run:
        for left in out.parent.glob(f".{out.name}.staging-*"):
            shutil.rmtree(left, ignore_errors=True)  # a first export that was interrupted
    rows = read_ledger(root, task)
    if settings.include_crashed:
        conditions = with_crashed(conditions)
        rows = resolve_crashed(root, rows, task)
    if runs:
        unknown = sorted(runs - {row.get("run_stem", "") for _line, row in rows})
        if unknown:  # a typo must not export an empty dataset and exit 0
            raise DatasetError(
                f"--run {', '.join(unknown)}: no such trial in {root}'s ledger "
                "(the ledger's run_stem column and the report list them)"
            )
    cands, report.skipped = select_trials(root, rows, conditions, runs, task)
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
        side_sums(e.get("sources_sha256")): e
        for e in (state.manifest["episodes"] if state else [])
        if side_sums(e.get("sources_sha256", {}))
    }
    sums_of: dict[str, dict[str, str]] = {}
    new: list[tuple[Candidate, EpisodeInfo]] = []
    for cand in cands:
        info = episode_info(
            root, cand.run_stem, cand.row, cand.recording_status, fallback_rig, records
        )
        if info.key in done:
            report.already.append(
                Skipped(cand.run_stem, f"already exported as episode {done[info.key]}")
            )
            continue
        sums = source_checksums(cand.recording_dir) if by_sources else None
        same = by_sources.get(side_sums(sums)) if sums else None
        if same is not None:
            report.already.append(
                Skipped(
                    cand.run_stem,
                    f"already exported as episode {same['episode_index']} (rig id "
                    f"{same['rig_id']}, run {same['run_stem']}): the same recording files",
                )
            )
            continue
        scale = info.time_scale
        if scale is not None and scale > 1.0 and not settings.allow_time_scaled:
            report.refused.append(
                Skipped(
                    cand.run_stem,
                    f"recorded at {scale:g}x real time (the simulated rig's time scale): its "
                    "rows have the arm's path, not its timing; pass --allow-time-scaled to "
                    "export it anyway",
                )
            )
            continue
        if sums:
            sums_of[cand.run_stem] = sums
        new.append((cand, info))
    size = (state.manifest["video"]["height"], state.manifest["video"]["width"]) if state else None
    top_size = top_video_size(state.manifest) if state else None
    ready = prepare(root, new, settings, size, top_size, report.refused)
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
                    crash_note(p.rec),
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

    w, h = scaled_size(ready[0].rec.width, ready[0].rec.height, settings.side_width)
    size = (h, w)
    first_top = ready[0].top
    if first_top is not None and top_size is None:
        w, h = scaled_size(first_top.width, first_top.height, settings.top_width)
        top_size = (h, w)
    manifest = (
        json.loads(json.dumps(state.manifest)) if state else new_manifest(settings, size, top_size)
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
    writer = EpisodeWriter(stage, settings, state, sizes)
    try:
        words = settings.task_words
        if words not in manifest["tasks"]:
            manifest["tasks"].append(words)
        task_index = manifest["tasks"].index(words)
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
                writer.add(prep, ep_index, start, task_index, words, bar.update)
                start += len(prep.ep)
                report.exported.append(
                    ExportedEpisode(
                        ep_index,
                        prep.rec.run_stem,
                        len(prep.ep),
                        len(prep.rec.frame_ts),
                        crash_note(prep.rec),
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
                        **dict(prep.info.verdicts),
                        "judge": prep.info.judge,
                        "success": prep.info.success,
                        # the dataset's frames are at the recording's pace: a trial at 5x
                        # real time moved the arm 5x faster than the real arm would
                        "time_scale": prep.info.time_scale,
                        # what `gripper.pos` is: the runtime does not read the jaws, so the
                        # state's is the command once its settle time has passed, not a
                        # measurement (docs/lerobot.md, "observation.state gripper")
                        "gripper_state": "command",
                        "gripper_settle_s": settings.gripper_settle_s,
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
                        **top_provenance(prep),
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
                scale = prep.info.time_scale
                if scale is not None and scale > 1.0:
                    log.warning(
                        "export_time_scaled",
                        run_stem=prep.rec.run_stem,
                        time_scale=scale,
                        reason=f"recorded at {scale:g}x real time (the simulated rig): the "
                        "arm's path, not its timing; the manifest's episode says so "
                        "(docs/lerobot.md)",
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
        fsync_file(stage / rel)
    if fresh:
        (stage / "meta").mkdir(parents=True, exist_ok=True)
        atomic_write_json(stage / L.MANIFEST_PATH, manifest)
        write_derived(stage, manifest, rows)
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
    write_derived(out, manifest, rows)
