"""Every run folder on the books: the start-up reconciliation (docs/runtime.md, "Interrupted
trials").

A trial whose runtime was killed (``kill -9``, a power cut, an OOM kill) leaves a run
folder with a trace that has no ``result`` line and no ledger row; nothing else would ever
account for it. At start, before the first trial, the runtime gives every run folder
without a ledger row one: from its trace (when it started, the stages it reached, the
verdicts it got) and its recording (the meta, or the media a killed recorder left), with
status ``interrupted``. A trace that does end in ``result`` (its row was lost with the
process after the trace was written) gets that result's status and reason.

The trace itself is never rewritten: it is the journal of what happened, and it ends where
the process ended.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mecharm_common.fsutil import OutsideRootError, inside_root
from mecharm_common.layout import RUN_STEM_RE, DataRoot
from mecharm_common.logging import get_logger
from mecharm_runtime.records.ledger import append_row, ledger_stems
from mecharm_runtime.records.runlog import iso
from mecharm_runtime.records.trace import TraceReadError, read_trace
from mecharm_runtime.topvideo import cut_log_to_video
from recorder.events import EventError, parse_recording_meta

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


def _trace_facts(path: Path) -> dict[str, Any]:
    """What the trace says: start, last line, stages reached, verdicts, scene, result."""
    facts: dict[str, Any] = {"stages": []}
    try:
        lines = list(read_trace(path))
    except (OSError, TraceReadError, ValueError) as exc:
        facts["unreadable"] = str(exc)
        return facts
    for e in lines:
        ts = e.get("ts")
        if isinstance(ts, int | float):
            facts.setdefault("started_ts", ts)
            facts["last_ts"] = ts
        ev, kind, value = e.get("event"), e.get("kind"), e.get("value")
        if ev == "trial" and e.get("stage") == "start":
            facts["dry_run"] = bool(e.get("dry_run"))
            facts["scene_seed"] = e.get("scene_seed")
        elif ev == "transition":
            stage = e.get("to")
            if isinstance(stage, str) and stage not in facts["stages"]:
                facts["stages"].append(stage)
        elif ev == "input" and isinstance(value, dict):
            if kind == "pick_verdict":
                facts["pick"] = value.get("verdict", "")
                facts["pick_confidence"] = value.get("confidence")
                facts["pick_attempts"] = facts.get("pick_attempts", 0) + 1
            elif kind == "place_verdict":
                facts["place"] = value.get("verdict", "")
                facts["place_confidence"] = value.get("confidence")
            elif kind == "scene" and value.get("ok"):
                facts["block_xz"] = value.get("block_xz")
                facts["box_xz"] = value.get("box_xz")
        elif ev == "decision" and kind == "pick_recheck" and isinstance(value, dict):
            revised = value.get("pick_verdict") if value.get("revised") else None
            if isinstance(revised, dict):  # the pick judged again from later evidence
                facts["pick"] = revised.get("verdict", "")
                facts["pick_confidence"] = revised.get("confidence")
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
    rel = str(DataRoot.recording_rel(stem))
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


def _xz(v: Any, i: int) -> float | None:
    if isinstance(v, list | tuple) and len(v) == 2 and isinstance(v[i], int | float):
        return float(v[i])
    return None


def reconcile_run_folders(root: Path) -> list[Reconciled]:
    """Give every run folder under ``root`` without a ledger row one (see the module
    docstring); returns what was added, in run order. A folder whose name is not a run
    stem, or that links out of the root, is left alone (and logged). Raises LedgerError
    when the ledger cannot be read or appended to (the start-up check names it first)."""
    layout = DataRoot(Path(root))
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
        facts = _trace_facts(layout.trace(stem))
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
        block, box = facts.get("block_xz"), facts.get("box_xz")
        row = {
            "run_stem": stem,
            "started_at": iso(started) if started is not None else "",
            "ended_at": iso(last) if last is not None else "",
            "duration_s": round(last - started, 3) if started is not None and last else None,
            "status": status,
            "reason": reason,
            "dry_run": facts.get("dry_run", False),
            "scene_seed": facts.get("scene_seed"),
            "pick_verdict": facts.get("pick", ""),
            "pick_confidence": facts.get("pick_confidence"),
            "place_verdict": facts.get("place", ""),
            "place_confidence": facts.get("place_confidence"),
            "pick_attempts": facts.get("pick_attempts", 0),
            "block_x": _xz(block, 0),
            "block_z": _xz(block, 1),
            "box_x": _xz(box, 0),
            "box_z": _xz(box, 1),
            "recording_path": rec_path,
            "recording_fps": fps,
            "recording_frames": frames,
            "recording_status": rec_status,
        }
        append_row(layout.ledger, row)
        known.add(stem)
        added.append(Reconciled(stem, status, reason, rec_status))
        log.warning(
            "run_reconciled",
            run_stem=stem,
            status=status,
            reason=reason,
            recording=rec_status,
        )  # the service says it on the console in its own words
    return added
