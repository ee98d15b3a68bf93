"""Every run folder on the books: the start-up reconciliation (docs/runtime.md, "Interrupted
trials").

A trial whose runtime was killed (``kill -9``, a power cut, an OOM kill) leaves a run
folder with a trace that has no ``result`` line and no ledger row; nothing else would ever
account for it. At start, before the first trial, the runtime gives every run folder
without a ledger row one: from its trace (when it started, the stages it reached, the
verdicts it got) and its recording (the meta, or the media a killed recorder left), with
status ``interrupted``. A trace that does end in ``result`` (its row was lost with the
process after the trace was written) gets that result's status and reason.

Every task's run folders are reconciled, each into its own ledger; the task's columns
come from its trace by the task's own fold (``TaskRecords.outcome``), as at a trial's end.

The trace itself is never rewritten: it is the journal of what happened, and it ends where
the process ended.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mecharm.common.fsutil import OutsideRootError, inside_root
from mecharm.common.layout import RUN_STEM_RE, DataRoot
from mecharm.common.logging import get_logger
from mecharm.recorder.events import EventError, parse_recording_meta
from mecharm.runtime.records.ledger import append_row, ledger_stems
from mecharm.runtime.records.outcome import TaskRecords
from mecharm.runtime.records.runlog import iso
from mecharm.runtime.records.trace import TraceReadError, read_trace
from mecharm.runtime.topvideo import cut_log_to_video

__all__ = ["INTERRUPTED", "Reconciled", "reconcile_run_folders"]

log = get_logger(__name__)

#: the ledger status of a trial whose process ended before its result
INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class Reconciled:
    run_stem: str
    status: str
    reason: str
    recording_status: str


def _trace_facts(path: Path, records: TaskRecords) -> dict[str, Any]:
    """What the trace says: start, last line, stages reached, the task's columns, result."""
    facts: dict[str, Any] = {"stages": [], "outcome": records.outcome([])}
    try:
        lines = list(read_trace(path))
    except (OSError, TraceReadError, ValueError) as exc:
        facts["unreadable"] = str(exc)
        return facts
    facts["outcome"] = records.outcome(lines)
    for e in lines:
        ts = e.get("ts")
        if isinstance(ts, int | float):
            facts.setdefault("started_ts", ts)
            facts["last_ts"] = ts
        ev = e.get("event")
        if ev == "trial" and e.get("stage") == "start":
            facts["dry_run"] = bool(e.get("dry_run"))
            facts["scene_seed"] = e.get("scene_seed")
        elif ev == "transition":
            stage = e.get("to")
            if isinstance(stage, str) and stage not in facts["stages"]:
                facts["stages"].append(stage)
        elif ev == "result":
            facts["result"] = (e.get("status", ""), e.get("reason", ""))
        if ev == "transition" and isinstance(e.get("to"), str):
            facts["last_stage"] = e["to"]  # a transition's own stage is the one it leaves
        elif isinstance(e.get("stage"), str):
            facts["last_stage"] = e["stage"]
    return facts


def _recording(layout: DataRoot, stem: str) -> tuple[str, float | None, int | None, str]:
    """(status, fps, frames, path) of the trial's recording as it is on disk now."""
    files = layout.recording(stem)
    rel = str(DataRoot.recording_rel(stem, layout.task))
    with contextlib.suppress(OSError, EventError):
        meta = parse_recording_meta(files.meta.read_bytes())
        return meta.status, meta.effective_fps, meta.frames_written, rel
    if any(p.is_file() for p in (files.video, files.frame_log, files.states)):
        # media without a meta: the recorder died too (or has not closed it yet); the
        # recorder's next start or `mecharm recording repair` writes the meta
        return "crashed", None, None, rel
    return "none", None, None, ""


def _cut_top_log(layout: DataRoot, stem: str) -> None:
    """The top camera's frame log of a cut trial, cut to the frames its video holds."""
    video, frame_log = layout.top_video(stem), layout.top_frame_log(stem)
    if not (video.is_file() and frame_log.is_file()):
        return
    try:
        removed = cut_log_to_video(video, frame_log, layout.top_frame_log_before_repair(stem))
    except (OSError, ValueError) as exc:
        log.warning("top_video_not_reconciled", run_stem=stem, reason=str(exc))
        return
    if removed:
        log.info("top_video_reconciled", run_stem=stem, rows_removed=removed)


def reconcile_run_folders(
    root: Path, records_of: Callable[[str], TaskRecords] | None = None
) -> list[Reconciled]:
    """Give every run folder under ``root``, of every task, without a row in its task's
    ledger one (see the module docstring); returns what was added, by task and in run
    order. ``records_of(task)``: the task's records (default: the registry's; a
    ValueError: a task this runtime does not know, whose folders are left alone and
    logged). A folder whose name is not a run stem, or that links out of the root, is left
    alone (and logged). Raises LedgerError when a ledger cannot be read or appended to
    (the start-up check names it first)."""
    if records_of is None:
        from mecharm.runtime.tasks import task_records  # the registry imports every task

        records_of = task_records
    added: list[Reconciled] = []
    for task in DataRoot(Path(root)).tasks():
        try:
            records = records_of(task)
        except ValueError as exc:
            log.warning("run_folders_of_unknown_task", task=task, reason=str(exc))
            continue
        added += _reconcile_task(DataRoot(Path(root), task), records)
    return added


def _reconcile_task(layout: DataRoot, records: TaskRecords) -> list[Reconciled]:
    try:
        folders = sorted(p for p in layout.run_folders.iterdir() if p.is_dir())
    except OSError:
        return []
    known = ledger_stems(layout.ledger)
    added: list[Reconciled] = []
    for folder in folders:
        stem = folder.name
        if stem in known:
            continue
        if not RUN_STEM_RE.fullmatch(stem):
            log.warning("run_folder_not_a_run", path=str(folder))
            continue
        try:
            inside_root(layout.root, folder)
        except OutsideRootError as exc:
            log.error("run_folder_outside_root", path=str(folder), reason=str(exc))
            continue
        facts = _trace_facts(layout.trace(stem), records)
        stages = facts["stages"]
        if "result" in facts:
            status, reason = facts["result"]
            reason = f"{reason} (row written at the next start)" if reason else ""
        elif not layout.trace(stem).exists():
            status = INTERRUPTED
            reason = (
                "interrupted: no trace in its run folder (the runtime ended before writing "
                "one, or the folder holds only a recording)"
            )
        else:
            status = INTERRUPTED
            where = facts.get("last_stage")
            reason = (
                (f"interrupted during {where}" if where else "interrupted before its first stage")
                + ": the runtime ended before the trial's result (killed or power lost); "
                "stages reached: " + (" > ".join(stages) or "none")
            )
            if "unreadable" in facts:
                reason += f"; trace unreadable: {facts['unreadable']}"
        if status == INTERRUPTED:
            _cut_top_log(layout, stem)
        rec_status, fps, frames, rec_path = _recording(layout, stem)
        started, last = facts.get("started_ts"), facts.get("last_ts")
        if started is None:
            with contextlib.suppress(OSError):
                started = last = os.stat(folder).st_mtime
        row = {
            "run_stem": stem,
            "started_at": iso(started) if started is not None else "",
            "ended_at": iso(last) if last is not None else "",
            "duration_s": round(last - started, 3) if started is not None and last else None,
            "status": status,
            "reason": reason,
            "dry_run": facts.get("dry_run", False),
            "scene_seed": facts.get("scene_seed"),
            **facts["outcome"],
            "recording_path": rec_path,
            "recording_fps": fps,
            "recording_frames": frames,
            "recording_status": rec_status,
        }
        append_row(layout.ledger, row, records.ledger_columns)
        known.add(stem)
        added.append(Reconciled(stem, status, reason, rec_status))
        log.warning(
            "run_reconciled",
            run_stem=stem,
            task=layout.task,
            status=status,
            reason=reason,
            recording=rec_status,
        )  # the service says it on the console in its own words
    return added
