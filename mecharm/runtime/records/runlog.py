"""The per-trial run log: one JSON file a person reads to understand a trial afterwards.

It is *derived* from the trial's trace (records/trace.py), not written beside it:
the stage machine writes each input, decision and fact once, into the trace, and
``build_runlog`` arranges those lines into sections — constants, stages,
detections, lookups, guards, moves with pre/post angles, gripper commands,
captures, judgements, correction, tip measurements, servo steps, side frames, the
release check (what was seen, the operator's answer), the height memory's update, the
exit path and the result with its reason. Only what happens after the trace is
closed (the recording's meta, a failed ledger append) is passed in. Written
atomically, also on abort. Sections are described in docs/runtime.md ("Records").
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mecharm.common.fsutil import atomic_write_json
from mecharm.runtime.records.trace import jsonable

__all__ = ["SECTIONS", "build_runlog", "write_runlog"]

#: a trace input or decision whose kind ends so is a judgement (``pick_verdict``: "pick")
VERDICT_SUFFIX = "_verdict"

#: The list sections of a run log, in file order.
SECTIONS = (
    "stages",
    "detections",
    "lookups",
    "guards",
    "moves",
    "gripper",
    "captures",
    "judgements",
    "tip_measurements",
    "servo",
    "side_frames",
    "release",
)


def iso(ts: float) -> str:
    """Local time with milliseconds, as the ledger writes it."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ts)) + f".{int((ts % 1) * 1000):03d}"


def build_runlog(
    lines: Iterable[dict[str, Any]], *, trace_name: str, after: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The run log of the trial whose trace ``lines`` are given (in order).

    ``after`` holds what happened once the trace was closed (``recording``,
    ``ledger_error``, ``ended_at``); it is merged into the sections of those names.
    """
    out: dict[str, Any] = {"run_stem": None}
    for name in SECTIONS:
        out[name] = []
    out.update(correction=None, height=None, exit=[], stage_times={}, recording=None, result=None)
    constants: dict[str, Any] = {}
    scenes = tips = 0
    judged: dict[str, int] = {}

    def judge(stage: Any, kind: str, value: dict[str, Any]) -> None:
        """A judgement, numbered per what was judged (``pick_verdict``: "pick")."""
        what = kind.removesuffix(VERDICT_SUFFIX)
        judged[what] = judged.get(what, 0) + 1
        out["judgements"].append({"stage": stage, "what": what, "attempt": judged[what], **value})

    durations: dict[str, float] = {}
    for e in lines:
        ev, stage = e.get("event"), e.get("stage")
        value: Any = e.get("value")
        kind = e.get("kind")
        if ev == "trial":
            constants = dict(e.get("constants") or {})
            out.update(
                run_stem=e.get("run_stem"),
                started_at=iso(float(e["ts"])),
                dry_run=e.get("dry_run"),
                scene_seed=e.get("scene_seed"),
                trace=trace_name,
                constants=constants,
            )
        elif ev == "input":
            if kind == "table_checksum":
                out["table_checksum"] = value
            elif kind == "envelope":
                out["envelope"] = value
            elif kind == "scene":
                scenes += 1
                out["detections"].append({"attempt": scenes, **value})
                out["captures"] += [{"stage": stage, "file": c} for c in value.get("captures", [])]
            elif kind == "tip":
                tips += 1
                out["tip_measurements"].append({"attempt": tips, **value})
                if value.get("capture"):
                    out["captures"].append({"stage": stage, "file": value["capture"]})
            elif _is_verdict(kind, value):  # pick_place: pick_verdict, place_verdict
                judge(stage, str(kind), value)
            elif kind in ("release_view", "release_answer"):
                out["release"].append({"stage": stage, "kind": kind, "value": value})
            elif kind == "side_frame":
                path, capture_ts, reason = value
                out["side_frames"].append({"tag": f"{stage}_side", "path": path, "capture_ts": capture_ts,
                                           "reason": reason})  # fmt: skip
        elif ev == "decision":
            if _is_verdict(kind, value):  # decided by the task itself (lift_return's return)
                judge(stage, str(kind), value)
            elif isinstance(value, dict) and value.get("revised"):
                # a judgement revised from later evidence (pick_place's pick_recheck): the
                # new verdict under its ``<what>_verdict`` key
                for key, new in value.items():
                    if key.endswith(VERDICT_SUFFIX) and isinstance(new, dict):
                        what = key.removesuffix(VERDICT_SUFFIX)
                        out["judgements"].append(
                            {"stage": stage, "what": what, "attempt": judged.get(what, 0),
                             "revised": True, **new}
                        )  # fmt: skip
            elif kind == "lookup":
                phase = str(value.get("phase", ""))
                lk = "j0_lookup" if phase.startswith("approach") else "fk_lookup"
                out["lookups"].append({"stage": stage, "kind": lk, **value})
            elif kind == "guard":
                out["guards"].append({"stage": stage, **value})
            elif kind == "gripper":  # {action, note, value}: the value is what the jaws were sent
                out["gripper"].append({"stage": stage, **value, "ts": e.get("ts")})
            elif kind == "correction":
                out["correction"] = value
            elif kind == "place_band":
                out["height"] = {
                    "key": value.get("key"),
                    "dee_y_mm": value.get("dee_y_mm"),
                    "band": value.get("band"),
                }
            elif kind in ("release_check", "release_override"):
                out["release"].append({"stage": stage, "kind": kind, "value": value})
            elif kind == "height_update":
                out["height"] = {**(out["height"] or {}), "update": value}
            elif kind == "exit":
                out["exit"] = value.get("steps", [value]) if isinstance(value, dict) else value
        elif ev == "log":
            section = e.get("section")
            if section == "move":
                out["moves"].append({"stage": stage, **value})
            elif section == "servo":
                out["servo"].append(value)
            elif section == "stage_time":
                durations[value["stage"]] = float(value["duration_s"])
                out["stage_times"][value["stage"]] = (
                    out["stage_times"].get(value["stage"], 0.0) + value["duration_s"]
                )
        elif ev == "transition":
            frm = e.get("frm")
            out["stages"].append({"stage": frm, "outcome": e.get("outcome"), "reason": e.get("reason"),
                                  "duration_s": durations.pop(str(frm), None), "ended_ts": e.get("ts")})  # fmt: skip
        elif ev == "result":
            out["result"] = {"status": e.get("status"), "reason": e.get("reason")}
    after = dict(after or {})
    if "recording" in after:
        out["recording"] = after.pop("recording")
    if out["result"] is None:  # a trace cut short (the trial was cancelled): say so, keep the rest
        out["result"] = {"status": None, "reason": "the trace has no result line"}
    out["result"].update(after)
    return jsonable(out)  # type: ignore[no-any-return]


def _is_verdict(kind: Any, value: Any) -> bool:
    return isinstance(kind, str) and kind.endswith(VERDICT_SUFFIX) and isinstance(value, dict)


def write_runlog(path: Path, runlog: dict[str, Any]) -> None:
    atomic_write_json(path, runlog)
