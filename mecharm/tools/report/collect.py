"""Read what a data root's trials left behind into one plain structure for the report page.

The ledger (read by the exporter's reader) lists the trials in order; each row is
completed from the trial's run log (stage durations), its trace (memory learning:
the first tip error, correction and height updates) and its recording meta. A file that
cannot be read marks its trial's row ``unreadable`` with the reason instead of stopping
the report (docs/report.md).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mecharm.common.fsutil import UnsafeNameError, validate_name
from mecharm.common.layout import DEFAULT_TASK, DataRoot, RecordingFiles
from mecharm.recorder.events import EventError, parse_recording_meta
from mecharm.runtime.config import TAG_RE
from mecharm.runtime.records.ledger import default_records
from mecharm.runtime.records.outcome import TaskRecords
from mecharm.runtime.records.trace import read_trace
from mecharm.runtime.tasks import UnknownTask, task_records
from mecharm.tools.export.selection import LedgerReadError, read_ledger

__all__ = [
    "BadRootError",
    "MemoryEvent",
    "RunData",
    "TrialData",
    "collect",
]


class BadRootError(ValueError):
    """The folder is not a data root with trials; the message says what to do."""


@dataclass
class MemoryEvent:
    """One memory decision of a trial, from its trace (correction_update / height_update)."""

    kind: str
    key: str
    values: dict[str, Any]


@dataclass
class TrialData:
    """One ledger row and what its files add; ``problems`` lists the files that could not be read."""

    lineno: int
    stem: str
    row: dict[str, str]
    run_dir: Path | None = None
    #: stage -> seconds, in the order the trial ran them
    stages: dict[str, float] = field(default_factory=dict)
    failed_stage: str = ""
    #: first tip measurement of the pick (mm from the block, before any servo step)
    first_tip_mm: float | None = None
    #: correction the memory applied to the first aim, mm (|dx, dz|)
    applied_mm: float | None = None
    #: entries in the correction and height memories when the trial started
    memory_sizes: tuple[int, int] | None = None
    memory_events: list[MemoryEvent] = field(default_factory=list)
    rec_status: str = ""
    rec_frames: int | None = None
    rec_fps: float | None = None
    rec_note: str = ""
    video: Path | None = None
    #: the recorder's states.csv (joints measured and commanded), when there is one
    states: Path | None = None
    rerun: Path | None = None
    #: the session's labels (``--tag``), from the run log
    tags: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    #: its task's records (pick_place's unless collect was told another task)
    records: TaskRecords = field(default_factory=default_records)

    @property
    def success(self) -> bool:
        """Completed, and a success by its task's rule (pick_place: both verdicts yes)."""
        return self.row.get("status") == "completed" and self.records.succeeded(self.row)

    def number(self, column: str) -> float | None:
        """A numeric ledger cell, None when empty or not a number."""
        try:
            v = float(self.row.get(column, ""))
        except ValueError:
            return None
        return v if math.isfinite(v) else None


@dataclass
class RunData:
    root: Path
    trials: list[TrialData]
    #: the runtime task these trials ran (its verdicts and success rule, docs/tasks.md)
    records: TaskRecords = field(default_factory=default_records)


def collect(root: Path, task: str = DEFAULT_TASK) -> RunData:
    """Every trial of ``task`` in ``root``'s ledger with its files; raise BadRootError when
    there is none."""
    root = Path(root)
    try:
        records = task_records(task)
    except UnknownTask as exc:
        raise BadRootError(str(exc)) from None
    dr = DataRoot(root, task)
    if not root.exists():
        raise BadRootError(f"no such folder: {root}")
    if not root.is_dir():
        raise BadRootError(f"{root} is a file, not a data root folder")
    if not dr.ledger.is_file():
        what = "has no runs folder" if not dr.runs.is_dir() else f"has no {dr.ledger.name}"
        raise BadRootError(
            f"{root} is not a data root with trials ({what}); give the folder the runtime "
            "wrote to (its --data-root), e.g. the one `make run` used"
        )
    try:
        rows = read_ledger(root, task)
    except LedgerReadError as exc:
        raise BadRootError(f"{exc}; check it with `mecharm ledger verify {dr.ledger}`") from None
    if not rows:
        raise BadRootError(f"ledger {dr.ledger} has no trials yet: run trials first")
    trials: list[TrialData] = []
    seen: dict[str, int] = {}
    for lineno, row in rows:
        t = _trial(dr, lineno, row)
        t.records = records
        if t.stem in seen:  # one row per trial: a second one is the ledger's problem, shown
            t.problems.append(f"ledger line {lineno} repeats the run stem of line {seen[t.stem]}")
        seen.setdefault(t.stem, lineno)
        trials.append(t)
    return RunData(root, trials, records)


def _trial(dr: DataRoot, lineno: int, row: dict[str, str]) -> TrialData:
    stem = row.get("run_stem", "")
    t = TrialData(lineno, stem or f"<line {lineno}>", row)
    try:
        validate_name(stem, "run_stem")
    except UnsafeNameError as exc:
        t.problems.append(f"ledger line {lineno}: {exc}")
        return t
    t.run_dir = dr.run_dir(stem)
    if not t.run_dir.is_dir():
        t.problems.append("run folder missing")
        t.run_dir = None
    _read_runlog(t, dr.runlog(stem))
    _read_trace(t, dr.trace(stem))
    _read_recording(t, dr.recording(stem))
    rrd = dr.rerun(stem)
    t.rerun = rrd if rrd.is_file() else None
    return t


def _read_runlog(t: TrialData, path: Path) -> None:
    try:
        log = json.loads(path.read_bytes())
    except FileNotFoundError:
        t.problems.append("run log missing")
        return
    except (OSError, ValueError) as exc:
        t.problems.append(f"run log unreadable: {_short(exc)}")
        return
    tags = log.get("tags") if isinstance(log, dict) else None
    if isinstance(tags, list):  # a run log from before the tags has none
        t.tags = [v for v in tags if isinstance(v, str) and TAG_RE.fullmatch(v)]
    stages = log.get("stages") if isinstance(log, dict) else None
    if not isinstance(stages, list):
        t.problems.append("run log unreadable: no stages list")
        return
    for s in stages:
        if not isinstance(s, dict):
            continue
        name, dur = s.get("stage"), s.get("duration_s")
        if isinstance(name, str) and isinstance(dur, int | float) and math.isfinite(dur):
            t.stages[name] = t.stages.get(name, 0.0) + float(dur)
        if s.get("outcome") not in ("ok", None) and not t.failed_stage:
            t.failed_stage = str(name)


def _read_trace(t: TrialData, path: Path) -> None:
    try:
        events = list(read_trace(path))
    except FileNotFoundError:
        t.problems.append("trace missing")
        return
    except (OSError, ValueError) as exc:
        t.problems.append(f"trace unreadable: {_short(exc)}")
        return
    for e in events:
        kind, value = e.get("kind"), e.get("value")
        if not isinstance(value, dict):
            continue
        if kind == "memories" and t.memory_sizes is None:
            corr, height = value.get("correction"), value.get("height")
            t.memory_sizes = (
                len(corr) if isinstance(corr, dict) else 0,
                len(height) if isinstance(height, dict) else 0,
            )
        elif kind == "tip" and t.first_tip_mm is None and value.get("ok"):
            t.first_tip_mm = _num(value.get("dist_mm"))
        elif kind == "correction" and t.applied_mm is None:
            applied = value.get("applied_mm")
            if isinstance(applied, list) and len(applied) == 2:
                dx, dz = _num(applied[0]), _num(applied[1])
                if dx is not None and dz is not None:
                    t.applied_mm = math.hypot(dx, dz)
        elif kind in ("correction_update", "height_update"):
            t.memory_events.append(MemoryEvent(kind, str(value.get("key", "")), value))


def _read_recording(t: TrialData, rec: RecordingFiles) -> None:
    """The meta decides (it may have been repaired since the row was written); else the ledger."""
    row = t.row
    t.rec_status = row.get("recording_status", "") or "none"
    t.rec_frames = _int(row.get("recording_frames", ""))
    t.rec_fps = t.number("recording_fps")
    t.video = rec.video if rec.video.is_file() else None
    t.states = rec.states if rec.states.is_file() else None
    try:
        meta = parse_recording_meta(rec.meta.read_bytes())
    except FileNotFoundError:
        if t.video is not None and t.rec_status == "none":
            t.rec_note = "video without its meta (the recorder died?)"
        return
    except (OSError, EventError) as exc:
        t.rec_note = f"meta unreadable: {_short(exc)}"
        return
    t.rec_status, t.rec_frames, t.rec_fps = meta.status, meta.frames_written, meta.effective_fps
    t.rec_note = meta.status_reason


def _num(v: Any) -> float | None:
    if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _short(exc: BaseException) -> str:
    text = str(exc) if not isinstance(exc, OSError) else (exc.strerror or str(exc))
    return text if len(text) <= 160 else text[:157] + "..."
