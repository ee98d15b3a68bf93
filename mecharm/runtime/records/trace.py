"""JSONL trace of one trial: the trial's one journal.

Every input the stage machine received, every decision it took and every fact a
person reading the trial afterwards needs (``log`` lines: full move records, servo
steps, the recording) go here once; the run log is built from it at the end
(records/runlog.py). Why a journal: ``mecharm replay`` feeds the recorded inputs (angle readings, detections, tip
measurements, verdicts, the FK table checksum) back into the same stage machine with
no arm and no camera and compares the decisions line by line. So inputs and
decisions are written in the order they happen, each line flushed at once (a crash
keeps everything up to the crash), and the last line is ``event=result`` with the
status (``completed``/``stopped``) and the reason. Wall-clock fields live only in
``ts`` and in ``log`` lines, which replay does not compare. The format is in
docs/replay.md ("Trace format").
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mecharm.common.fsutil import DataRootGuard, LineFile, describe_os_error
from mecharm.common.logging import get_logger

__all__ = [
    "DECISION_EVENTS",
    "TRACE_FORMAT",
    "TraceLines",
    "TraceReadError",
    "TraceWriter",
    "jsonable",
    "read_lines",
    "read_trace",
]

log = get_logger("mecharm.runtime.records.trace")

#: Event kinds that replay compares (inputs are fed, ``log`` lines are for people).
DECISION_EVENTS = ("decision", "transition", "result")
#: 2: stage names that say what they do, ``sent`` inputs, ``log`` lines (1: the first format).
TRACE_FORMAT = 2


def jsonable(value: Any) -> Any:
    """Plain JSON types for a trace value (tuples → lists, numpy → python, NaN → None)."""
    if value is None or isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return jsonable(to_dict())
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump):
        return jsonable(model_dump(mode="json"))
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars
    if callable(tolist):
        return jsonable(tolist())
    if hasattr(value, "__dataclass_fields__"):
        return {k: jsonable(getattr(value, k)) for k in value.__dataclass_fields__}
    return str(value)


class TraceWriter:
    """Append-only JSONL writer; ``path=None`` keeps the lines in memory only.

    The trial's motion never depends on a write succeeding (docs/reliability.md): a
    write that fails (disk full, I/O error, the root unmounted under it) cuts the file
    back to its last whole line, sets ``fault`` to the reason and keeps every line in
    memory; the stage machine reads ``fault`` at the next stage boundary and ends
    the trial safely, and ``recover()`` appends the missing lines once the data root
    is back. Lines go out with ``os.write`` on an unbuffered descriptor, so no
    library buffer can hold half a line.
    """

    def __init__(
        self,
        path: Path | None,
        guard: DataRootGuard | None = None,
        on_line: Callable[[dict[str, Any]], None] | None = None,
        keep_lines: int | None = None,
    ) -> None:
        self.path = path
        #: at most this many lines stay in memory once written (None: all, as a trial keeps
        #: them for its records); a session of hours (the LeRobot robot) keeps its tail only
        self.keep_lines = keep_lines
        #: told every line once written (the operator's console); its failure is only logged
        self.on_line = on_line
        self.guard = guard
        self.seq = 0
        self.stage: str | None = None
        self.lines: list[dict[str, Any]] = []
        self.fault: str | None = None
        self.written = 0  # lines[:written] are on disk
        self._file: LineFile | None = None
        if path is not None:
            if guard is not None:
                guard.ensure()
                guard.inside(path)
            self._file = LineFile(path)
        self.closed = False

    def write(self, event: str, **fields: Any) -> dict[str, Any]:
        if self.closed:
            raise ValueError(f"trace {self.path} is closed; cannot write {event}")
        self.seq += 1
        line = {
            "seq": self.seq,
            "event": event,
            "stage": self.stage,
            **jsonable(fields),
            "ts": time.time(),
        }
        self.lines.append(line)
        self._persist()
        if self.keep_lines is not None:
            self._trim(self.keep_lines)
        if self.on_line is not None:
            try:
                self.on_line(line)
            except Exception as exc:  # a listener never changes the trial
                log.warning("trace_listener_failed", error=f"{type(exc).__name__}: {exc}")
        return line

    def _persist(self) -> None:
        if self._file is None or self.fault is not None:
            return
        for ln in self.lines[self.written :]:
            self._file.write(json.dumps(ln, allow_nan=False) + "\n")
        try:
            self._file.flush()  # cut back to the last whole line when it fails
        except OSError as exc:
            self._fail(describe_os_error(exc, "writing the trace"))
            return
        self.written = len(self.lines)

    def _trim(self, keep: int) -> None:
        """Forget the oldest lines beyond ``keep``: only lines already on disk when there is
        a file (``recover`` needs the others), any when there is none."""
        excess = (self.written if self.path is not None else len(self.lines)) - keep
        if excess > 0:
            del self.lines[:excess]
            if self.path is not None:
                self.written -= excess

    def _fail(self, reason: str) -> None:
        """Stop writing; every line stays in memory for ``recover``."""
        self.fault = reason
        file, self._file = self._file, None
        if file is not None:
            file.discard_pending()
            with contextlib.suppress(OSError):
                file.close()

    def check_storage(self) -> str | None:
        """The storage fault, if any: a failed write, or the guard finding the root changed."""
        if self.fault is None and self.guard is not None and self._file is not None:
            problem = self.guard.problem()
            if problem is not None:
                self._fail(problem)
        return self.fault

    @property
    def pending(self) -> int:
        """Lines only in memory (written after a storage fault)."""
        return len(self.lines) - self.written if self.path is not None else 0

    def recover(self) -> int:
        """Append the lines the file is missing once the root is back; returns how many.

        The file on disk may hold fewer lines than ``written`` (a remounted SSD keeps
        what reached it before the pull) or not exist at all (a fresh disk): the lines
        whose ``seq`` is above the last whole line on disk are appended. Raises
        OSError/StorageFault when the root still cannot take them.
        """
        if self.path is None or self.pending == 0:
            return 0
        if self.guard is not None:
            self.guard.ensure(probe=True)
            self.guard.inside(self.path)
            self.guard.mkdir(self.path.parent)
        have = 0
        if self.path.exists():
            for line in read_trace(self.path):
                have = max(have, int(line.get("seq", 0)))
            _cut_partial_tail(self.path)
        missing = [ln for ln in self.lines if int(ln["seq"]) > have]
        out = LineFile(self.path)
        try:
            for ln in missing:
                out.write(json.dumps(ln, allow_nan=False) + "\n")
        finally:
            out.close()
        self.written = len(self.lines)
        return len(missing)

    def input(self, kind: str, value: Any) -> Any:
        """Record an input from outside (reading, detection, verdict ...); returns it unchanged."""
        self.write("input", kind=kind, value=value)
        return value

    def decision(self, kind: str, value: Any) -> None:
        self.write("decision", kind=kind, value=value)

    def log(self, section: str, value: Any) -> None:
        """A fact for the run log that is no decision (may hold wall times; replay skips it)."""
        self.write("log", section=section, value=value)

    def result(self, status: str, reason: str) -> None:
        self.write("result", status=status, reason=reason)
        self.close()

    def close(self) -> None:
        self.closed = True
        file, self._file = self._file, None
        if file is not None:
            try:
                file.close()
            except OSError as exc:
                self.fault = self.fault or describe_os_error(exc, "syncing the trace")


def _cut_partial_tail(path: Path) -> None:
    """Remove a last line without its newline (a write cut short), so appends start clean."""
    with open(path, "rb+") as fh:
        data = fh.read()
        if data and not data.endswith(b"\n"):
            fh.truncate(data.rfind(b"\n") + 1)


class TraceReadError(ValueError):
    """A trace file that cannot be read as JSON lines; the message names the file and line."""


@dataclass
class TraceLines:
    """The whole lines of a trace file, numbered from 1, and how it ended."""

    lines: list[tuple[int, dict[str, Any]]]
    #: the number of a last line cut short (no newline, not JSON) that was left out
    cut_tail: int | None = None
    #: the number of a last line that is whole JSON but has no newline after it
    unterminated: int | None = None


def read_lines(path: Path) -> TraceLines:
    """Every non-empty line of ``path`` as (line number, object); the one reader of trace files.

    A last line cut short (no newline and not JSON: the process died or the disk filled
    mid-write) is left out and named in ``cut_tail``; what a reader does about it is its
    own: the runtime and the viewer go on without it, replay refuses a truncated trace.
    Raises TraceReadError for an unreadable file, bytes that are not UTF-8, or a line
    before the last that is not a JSON object.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise TraceReadError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceReadError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    raw_lines = text.split("\n")  # the last piece is "" when the file ends with a newline
    out = TraceLines([])
    for n, raw in enumerate(raw_lines, 1):
        if not raw.strip():
            continue
        last = n == len(raw_lines)
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            if last:
                out.cut_tail = n
                log.warning("trace_truncated_tail", path=str(path), line=n, dropped_bytes=len(raw))
                break
            raise TraceReadError(
                f"{path}:{n}: not JSON ({exc.msg} at column {exc.colno})"
            ) from None
        if not isinstance(obj, dict):
            raise TraceReadError(f"{path}:{n}: not a JSON object")
        if last:
            out.unterminated = n
        out.lines.append((n, obj))
    return out


def read_trace(path: Path) -> Iterator[dict[str, Any]]:
    """Yield the lines of a trace file (``read_lines``, a cut last line left out); raise
    ValueError naming a line that is not a trace event."""
    for n, obj in read_lines(path).lines:
        if "event" not in obj:
            raise TraceReadError(f"{path}:{n}: not a trace event object")
        yield obj
