"""Read and check a trial trace before replaying it.

Why strict: a replay that silently skips a bad line would compare the wrong things
and could report "identical" for a trace it never really ran. So every line must be
a JSON object with a known event; every input must have a known kind and a value
its port type accepts; the trace must start with the ``trial`` line and end with
the ``result`` line (a missing result means a truncated trace). Any violation is a
``TraceFormatError`` naming the file and the line.

Traces of the first format (no ``format`` on the trial line: stage names
``stage1``..``stage10``, ``send_t`` inputs) are read too: their stage names are
mapped to today's (``pick_place.stages.FORMER_NAMES``) as they are read, so they replay
against today's code. See docs/replay.md ("Trace format").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mecharm.common.envelope import Envelope
from mecharm.common.gripper import GRIPPER_CLOSE_VALUE, GRIPPER_OPEN_VALUE
from mecharm.common.layout import (
    RERUN_SUFFIX,
    RUN_FOLDER_PREFIX,
    RUNLOG_SUFFIX,
    RUNS_DIR,
    TRACE_SUFFIX,
)
from mecharm.runtime.pick_place.stages import FORMER_NAMES
from mecharm.runtime.ports import (
    Reading,
    ReleaseView,
    SceneObservation,
    Sent,
    TipObservation,
    VerdictObservation,
)
from mecharm.runtime.records.trace import TraceReadError
from mecharm.runtime.records.trace import read_lines as trace_lines

__all__ = [
    "EVENTS",
    "INPUT_KINDS",
    "NotATrace",
    "Recorded",
    "RecordedInput",
    "RecordedInstance",
    "TraceFormatError",
    "find_trace",
    "parse_trace",
    "read_lines",
    "read_recorded",
    "upgrade_lines",
]

#: Every event a trace may hold.
EVENTS = ("trial", "input", "decision", "log", "transition", "result")


def _float(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"expected a number, got {v!r}")
    return float(v)


def _xz(v: Any) -> tuple[float, float] | None:
    if v is None:
        return None
    if not isinstance(v, list) or len(v) != 2:
        raise ValueError(f"expected [x, z] or null, got {v!r}")
    return _float(v[0]), _float(v[1])


def _reading(v: Any) -> Reading:
    r = Reading.from_dict(v)
    if r.angles is not None and len(r.angles) != 6:
        raise ValueError(f"expected 6 angles, got {len(r.angles)}")
    return r


def _side_frame(v: Any) -> tuple[str | None, float | None, str]:
    if not isinstance(v, list) or len(v) != 3:
        raise ValueError(f"expected [path, capture_ts, reason], got {v!r}")
    p, ts, reason = v
    if p is not None and not isinstance(p, str):
        raise ValueError(f"side frame path must be a string or null, got {p!r}")
    return p, None if ts is None else _float(ts), str(reason)


def _memories(v: Any) -> dict[str, dict[str, Any]]:
    if (
        not isinstance(v, dict)
        or not isinstance(v.get("correction"), dict)
        or not isinstance(v.get("height"), dict)
    ):
        raise ValueError("expected {correction: {...}, height: {...}}")
    return {"correction": dict(v["correction"]), "height": dict(v["height"])}


def _checksum(v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise ValueError(f"expected the table checksum string, got {v!r}")
    return v


#: input kind -> parser into the type its port returns (raises on a bad value)
INPUT_KINDS: dict[str, Callable[[Any], Any]] = {
    "table_checksum": _checksum,
    "envelope": Envelope.from_wire,
    "memories": _memories,
    "angles": _reading,
    "sent": Sent.from_dict,
    "send_t": _float,  # first format: the send time only
    "scene": SceneObservation.from_dict,
    "tip": TipObservation.from_dict,
    "block_xz": _xz,
    "pick_verdict": VerdictObservation.from_dict,
    "place_verdict": VerdictObservation.from_dict,
    "look_verdict": VerdictObservation.from_dict,
    "side_frame": _side_frame,
    "release_view": ReleaseView.from_dict,
    "release_answer": VerdictObservation.from_dict,
}


class TraceFormatError(ValueError):
    """The trace is not a well-formed trial trace; the message names the line."""


@dataclass(frozen=True)
class RecordedInput:
    kind: str
    value: Any  # parsed: Reading, SceneObservation, float, ...
    line: int
    stage: str | None
    instance: int  # index of the stage run it belongs to (transitions before it)


@dataclass
class RecordedInstance:
    """One run of one stage in the recorded trial (detect twice after a pick retry = two)."""

    stage: str | None
    decisions: int = 0
    inputs: int = 0
    end: dict[str, Any] | None = None  # the transition that closed it (None: abort/end tail)


@dataclass
class Recorded:
    path: Path
    lines: list[tuple[int, dict[str, Any]]]  # (line number, event)
    header: dict[str, Any]
    result: dict[str, Any]
    table_checksum: str
    memories: dict[str, dict[str, Any]]
    inputs: list[RecordedInput] = field(default_factory=list)
    instances: list[RecordedInstance] = field(default_factory=list)
    #: the daemon's safety envelope the trial was guarded with (None: none announced)
    envelope: Envelope | None = None

    @property
    def constants(self) -> dict[str, Any]:
        c = self.header.get("constants")
        return dict(c) if isinstance(c, dict) else {}


def read_lines(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-empty line; TraceFormatError on the first bad one,
    and on a last line without its newline (a trace cut short is never replayed)."""
    try:
        read = trace_lines(path)
    except TraceReadError as exc:
        raise TraceFormatError(str(exc)) from None
    end = read.cut_tail or read.unterminated
    if end is not None:
        raise TraceFormatError(f"{path}:{end}: last line has no newline (truncated trace)")
    return read.lines


def parse_trace(path: Path, lines: list[tuple[int, dict[str, Any]]]) -> Recorded:
    """Check the structure and parse every input; raise TraceFormatError naming the line."""
    if not lines:
        raise TraceFormatError(f"{path}: empty file, not a trial trace")
    header: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    checksum: str | None = None
    memories: dict[str, dict[str, Any]] | None = None
    envelope: Envelope | None = None
    inputs: list[RecordedInput] = []
    instances = [RecordedInstance(stage=None)]
    prev_seq = 0
    for n, e in lines:
        where = f"{path}:{n}"
        ev = e.get("event")
        if ev not in EVENTS:
            raise TraceFormatError(f"{where}: unknown event {ev!r} (known: {', '.join(EVENTS)})")
        seq = e.get("seq")
        if isinstance(seq, int) and not isinstance(seq, bool):
            if seq != prev_seq + 1:
                raise TraceFormatError(
                    f"{where}: seq {seq} after {prev_seq} (lines missing or out of order)"
                )
            prev_seq = seq
        else:
            raise TraceFormatError(f"{where}: missing or non-integer seq")
        if result is not None:
            raise TraceFormatError(f"{where}: {ev} after the result line")
        if header is None and ev != "trial":
            raise TraceFormatError(
                f"{where}: first event is {ev!r}, a trial trace starts with 'trial'"
            )
        if ev == "trial":
            if header is not None:
                raise TraceFormatError(f"{where}: second 'trial' line")
            if not isinstance(e.get("constants"), dict):
                raise TraceFormatError(f"{where}: trial line without its constants object")
            header = e
        elif ev == "input":
            kind = e.get("kind")
            parser = INPUT_KINDS.get(kind) if isinstance(kind, str) else None
            if parser is None or not isinstance(kind, str):
                raise TraceFormatError(
                    f"{where}: unknown input kind {kind!r} (known: {', '.join(INPUT_KINDS)})"
                )
            if "value" not in e:
                raise TraceFormatError(f"{where}: input {kind} without a value")
            try:
                value = parser(e["value"])
            except (KeyError, TypeError, ValueError, IndexError) as exc:
                raise TraceFormatError(f"{where}: input {kind}: bad value: {exc}") from None
            if kind == "table_checksum":
                checksum = value
            elif kind == "memories":
                memories = value
            elif kind == "envelope":
                envelope = value
            else:
                inputs.append(RecordedInput(kind, value, n, e.get("stage"), len(instances) - 1))
                instances[-1].inputs += 1
        elif ev == "decision":
            if not isinstance(e.get("kind"), str):
                raise TraceFormatError(f"{where}: decision without a kind")
            instances[-1].decisions += 1
        elif ev == "log":  # facts for the run log: not fed, not compared
            if not isinstance(e.get("section"), str):
                raise TraceFormatError(f"{where}: log line without a section")
        elif ev == "transition":
            for key in ("frm", "to", "outcome", "reason"):
                if not isinstance(e.get(key), str):
                    raise TraceFormatError(f"{where}: transition without {key!r}")
            instances[-1].stage = e["frm"]
            instances[-1].end = e
            instances.append(RecordedInstance(stage=None))
        else:  # result
            if not isinstance(e.get("status"), str) or not isinstance(e.get("reason"), str):
                raise TraceFormatError(f"{where}: result line without status/reason")
            result = e
    last = lines[-1][0]
    if result is None:
        raise TraceFormatError(
            f"{path}:{last}: no result line at the end (truncated trace: the trial did not finish "
            "writing it)"
        )
    assert header is not None
    if checksum is None:
        raise TraceFormatError(
            f"{path}: no table_checksum input (the trace cannot say which FK table it used)"
        )
    if memories is None:
        raise TraceFormatError(
            f"{path}: no memories input (the trace cannot say what the memories held)"
        )
    return Recorded(
        path, lines, header, result, checksum, memories, inputs, instances, envelope=envelope
    )


#: a former stage name where reasons carry one: "<stage>: ..." and "forced stop during <stage> "
_FORMER = re.compile(
    r"(^|forced stop during )("
    + "|".join(sorted(map(re.escape, FORMER_NAMES), key=len, reverse=True))
    + r")(?=: | \()"
)


#: settings renamed since the first format
_FORMER_CONSTANTS = {"gripper_sleep_s": "gripper_settle_s"}


def _renamed(text: str) -> str:
    """Former stage names where a reason names its stage; other words (e.g. "correction") stay."""
    return _FORMER.sub(lambda m: m.group(1) + FORMER_NAMES[m.group(2)], text)


def upgrade_lines(lines: list[tuple[int, dict[str, Any]]]) -> list[tuple[int, dict[str, Any]]]:
    """First-format traces (no ``format`` on the trial line) with today's stage names.

    Stage names appear as the ``stage`` of every line, as ``frm``/``to`` of
    transitions and in abort reasons ("stage4_pick: ...", "forced stop during
    stage2 (operator)"); one setting was renamed (``gripper_sleep_s``); gripper
    decisions gain the value the action sent (open 100, close the recorded
    ``gripper_close_value``). Nothing else is touched, so decisions compare as
    recorded.
    """
    if not lines or lines[0][1].get("event") != "trial" or "format" in lines[0][1]:
        return lines
    out = []
    for n, e in lines:
        e = dict(e)
        if e.get("event") == "trial" and isinstance(e.get("constants"), dict):
            e["constants"] = {_FORMER_CONSTANTS.get(k, k): v for k, v in e["constants"].items()}
        if isinstance(e.get("stage"), str):
            e["stage"] = FORMER_NAMES.get(e["stage"], e["stage"])
        for key in ("frm", "to"):
            if isinstance(e.get(key), str):
                e[key] = FORMER_NAMES.get(e[key], e[key])
        if e.get("event") in ("transition", "result") and isinstance(e.get("reason"), str):
            e["reason"] = _renamed(e["reason"])
        if (
            e.get("event") == "decision"
            and e.get("kind") == "gripper"
            and isinstance(e.get("value"), dict)
        ):
            # format 1 traced the action only; its value followed from it (docs/runtime.md, "Gripper")
            close = lines[0][1]["constants"].get("gripper_close_value", GRIPPER_CLOSE_VALUE)
            sent = GRIPPER_OPEN_VALUE if e["value"].get("action") == "open" else close
            e["value"] = {**e["value"], "value": sent}
        out.append((n, e))
    return out


class NotATrace(TraceFormatError):
    """The path is not a trace: missing, another file of the trial (its run log, its Rerun
    file) or a folder that is not one trial's; the message names what to give instead
    (docs/setup.md, "Traps")."""


def find_trace(path: Path, tool: str) -> Path:
    """The trace the user meant by ``path``: the trace itself, or the run folder's own trace.

    The one answer for every tool that reads a trial (``mecharm replay``, ``mecharm view``);
    ``tool`` names the command in the message. The run log (``.json``) and the Rerun file
    (``.rrd``) beside the trace are answered with the trace's name. Any other file is taken
    as a trace and its content decides.
    """
    path = Path(path)
    if not path.exists():
        raise NotATrace(
            f"{path}: cannot read: no such file or folder (give a run folder or its *{TRACE_SUFFIX})"
        )
    if path.is_dir():
        own = path / f"{path.name}{TRACE_SUFFIX}"
        if own.is_file():
            return own
        found = sorted(path.glob(f"*{TRACE_SUFFIX}"))
        if len(found) == 1:
            return found[0]
        if found:
            raise NotATrace(
                f"{path}: {len(found)} traces in this folder; {tool} takes one of them, e.g. {found[0]}"
            )
        raise NotATrace(
            f"{path}: not a trial folder (no *{TRACE_SUFFIX} in it); give a run folder under "
            f"{RUNS_DIR}/{RUN_FOLDER_PREFIX}<task>/ or a trace file"
        )
    if path.name.endswith(TRACE_SUFFIX):
        return path
    for suffix, what in ((RUNLOG_SUFFIX, "the run log"), (RERUN_SUFFIX, "a Rerun recording")):
        if path.name.endswith(suffix):
            stem = path.name[: -len(suffix)]
            trace = path.with_name(stem + TRACE_SUFFIX)
            opened = f" (open it with `rerun {path}`)" if suffix == RERUN_SUFFIX else ""
            missing = "" if trace.is_file() else ", not there either"
            raise NotATrace(
                f"{path} is {what}{opened}; {tool} takes the trace: {trace.name} beside it "
                f"({trace}{missing})"
            )
    return path


def read_recorded(path: Path) -> Recorded:
    """Read and check ``path`` (a trace or a run folder); raise TraceFormatError naming the
    line that is wrong (NotATrace when it is no trace: ``find_trace``)."""
    path = find_trace(path, "replay")
    return parse_trace(path, upgrade_lines(read_lines(path)))
