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

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["DECISION_EVENTS", "TRACE_FORMAT", "TraceWriter", "jsonable", "read_trace"]

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
    """Append-only JSONL writer; ``path=None`` keeps the lines in memory only."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.seq = 0
        self.stage: str | None = None
        self.lines: list[dict[str, Any]] = []
        self._fh: IO[str] | None = open(path, "a", encoding="utf-8") if path is not None else None  # noqa: SIM115
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
        if self._fh is not None:
            self._fh.write(json.dumps(line, allow_nan=False) + "\n")
            self._fh.flush()
        return line

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
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def read_trace(path: Path) -> Iterator[dict[str, Any]]:
    """Yield the lines of a trace file; raise ValueError naming the line that is not JSON."""
    with open(path, encoding="utf-8") as fh:
        for n, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: not JSON: {exc.msg}") from None
            if not isinstance(obj, dict) or "event" not in obj:
                raise ValueError(f"{path}:{n}: not a trace event object")
            yield obj
