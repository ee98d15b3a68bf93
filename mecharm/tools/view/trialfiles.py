"""Find and read one trial's files for the viewer, tolerating what is missing.

A recording is for looking, not for replaying, so unlike ``mecharm replay`` this
reader builds from whatever is there: a trace without its result line (the runtime
was killed), a trial without side video (recorder off, or still finishing the mp4),
a dry run without stage images, a first-format trace. Each gap becomes one line in
``TrialFiles.notes``; only input that is not a trial at all (no such path, the run
log given instead of the trace, a line in the middle of the trace that is not JSON)
raises ``ViewInputError`` (docs/viewing.md).
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mecharm.common.layout import RECORDING, STAGE_RAW, TRACE_SUFFIX, RecordingFiles
from mecharm.runtime.records.trace import TraceReadError, read_lines
from mecharm.tools.replay.tracefile import NotATrace, upgrade_lines
from mecharm.tools.replay.tracefile import find_trace as shared_find_trace

__all__ = [
    "TrialFiles",
    "ViewInputError",
    "find_trace",
    "parse_line",
    "read_csv",
    "read_trial",
    "stage_images",
]


class ViewInputError(ValueError):
    """The path given is not a trial the viewer can read; the message says what to give."""


def find_trace(path: Path) -> Path:
    """The trace of ``path`` (a run folder or a trace file): the same answer and messages as
    ``mecharm replay`` (``replay.tracefile.find_trace``); ViewInputError names the mistake."""
    try:
        return shared_find_trace(Path(path), "view")
    except NotATrace as exc:
        raise ViewInputError(str(exc)) from None


def parse_line(path: Path, n: int, raw: str) -> dict[str, Any]:
    """One trace line as an object; ViewInputError naming the file and line when it is not one."""
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ViewInputError(f"{path}:{n}: not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise ViewInputError(f"{path}:{n}: not a JSON object")
    return obj


def read_csv(path: Path) -> list[dict[str, str]]:
    """Rows of a CSV as dicts; a row cut short by a killed writer is dropped."""
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        cols = len(reader.fieldnames or ())
        return [row for row in reader if None not in row.values() and len(row) == cols]


def stage_images(run_dir: Path) -> list[Path]:
    """The top-camera images the runtime saved in the run folder, by name: each capture's raw
    frame (``raw/{tag}.jpg``) when the trial kept one, so the recording's own overlays draw on
    the pixels perception saw, not over the runtime's drawn marks; else the stage JPEG of a
    trial from before the overlays (docs/stage-images.md)."""
    out = []
    for p in sorted(run_dir.glob("*.jpg")):
        if p.is_file():
            raw = run_dir / STAGE_RAW / p.name
            out.append(raw if raw.is_file() else p)
    return out


@dataclass
class TrialFiles:
    """What one trial left on disk, as far as it could be read."""

    trace: Path
    run_dir: Path
    stem: str
    events: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    states: list[dict[str, str]] = field(default_factory=list)
    frame_log: list[dict[str, str]] = field(default_factory=list)
    meta: dict[str, Any] | None = None
    video: Path | None = None
    images: list[Path] = field(default_factory=list)

    @property
    def header(self) -> dict[str, Any]:
        first = self.events[0] if self.events else {}
        return first if first.get("event") == "trial" else {}

    @property
    def constants(self) -> dict[str, Any]:
        c = self.header.get("constants")
        return c if isinstance(c, dict) else {}


def read_events(trace: Path, notes: list[str]) -> list[dict[str, Any]]:
    """Every trace line (the runtime's own reader), first-format stage names upgraded; a last
    line cut short is left out with a note."""
    try:
        read = read_lines(trace)
    except TraceReadError as exc:
        raise ViewInputError(str(exc)) from None
    if read.cut_tail is not None:
        notes.append(
            f"trace line {read.cut_tail} is cut short (the trial did not finish writing it); skipped"
        )
    numbered = read.lines
    if not numbered:
        raise ViewInputError(f"{trace}: empty file, not a trial trace")
    if numbered[0][1].get("event") != "trial":
        raise ViewInputError(
            f"{trace}:1: not a trial trace (its first line is not the 'trial' line)"
        )
    if "format" not in numbered[0][1]:
        notes.append("first-format trace: stage names upgraded to today's")
    events = [e for _n, e in upgrade_lines(numbered)]
    if not any(e.get("event") == "result" for e in events):
        notes.append(
            "trace has no result line (the trial was cut short); shown up to its last line"
        )
    return events


def read_trial(path: Path) -> TrialFiles:
    """Read the trial at ``path`` (run folder or trace); ViewInputError when it is no trial."""
    trace = find_trace(Path(path))
    notes: list[str] = []
    events = read_events(trace, notes)
    stem = trace.name[: -len(TRACE_SUFFIX)]
    tf = TrialFiles(trace=trace, run_dir=trace.parent, stem=stem, events=events, notes=notes)
    if tf.header.get("dry_run"):
        notes.append("dry run: the arm never moved; no side video or stage images expected")
    read_recording(tf)
    tf.images = stage_images(tf.run_dir) if tf.run_dir.name == stem else []
    if not tf.images and not tf.header.get("dry_run") and tf.run_dir.name == stem:
        notes.append("no stage images in the run folder")
    return tf


def read_recording(tf: TrialFiles) -> None:
    """The side recording's meta, frame log, states and video, each only if readable."""
    rec = RecordingFiles(tf.run_dir / RECORDING)
    if tf.run_dir.name != tf.stem or not rec.dir.is_dir():
        tf.notes.append("no side recording (recorder off, or a trace outside its run folder)")
        return
    try:
        meta = json.loads(rec.meta.read_text(encoding="utf-8"))
        tf.meta = meta if isinstance(meta, dict) else None
    except (OSError, ValueError):
        tf.notes.append(
            f"no readable {rec.meta.name}: the recording did not end normally (or is still being "
            "finished)"
        )
    for attr, p in (("states", rec.states), ("frame_log", rec.frame_log)):
        try:
            setattr(tf, attr, read_csv(p))
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            tf.notes.append(f"{p.name} not read ({type(exc).__name__}: {exc})")
    if rec.video.is_file() and rec.video.stat().st_size > 0:
        tf.video = rec.video
    else:
        tf.notes.append(f"no side video ({rec.video.name} missing)")
