"""What a lift-and-return trial puts in the records (``TaskRecords``, records/outcome.py):
the pick verdict and attempts, the return verdict and how far the block moved, where it
was; folded from the trace as pick-and-place's are."""

from __future__ import annotations

from typing import Any

from mecharm.runtime.pick_place.records import pick_outcome
from mecharm.runtime.records.outcome import TaskRecords, TraceLines

__all__ = ["RECORDS"]


def _at(out: dict[str, Any], xz: Any) -> None:
    if isinstance(xz, list) and len(xz) == 2 and all(isinstance(v, int | float) for v in xz):
        out["block_x"], out["block_z"] = float(xz[0]), float(xz[1])


def _from_trace(lines: TraceLines) -> dict[str, Any]:
    lines = list(lines)
    out: dict[str, Any] = {**pick_outcome(lines), "return_verdict": ""}
    for e in lines:
        ev, kind, value = e.get("event"), e.get("kind"), e.get("value")
        if not isinstance(value, dict):
            continue
        if ev == "input" and kind == "scene" and e.get("stage") == "detect" and value.get("ok"):
            _at(out, value.get("block_xz"))  # where detect saw the block (the last detect)
        elif ev == "decision" and kind == "return_verdict":
            out["return_verdict"] = value.get("verdict", "")
            out["moved_mm"] = value.get("moved_mm")
            _at(out, value.get("from_xz"))
    return out


RECORDS = TaskRecords(
    task="lift_return",
    instruction="lift the red block and put it back where it was",
    columns=("pick_verdict", "pick_attempts", "return_verdict", "moved_mm", "block_x", "block_z"),
    from_trace=_from_trace,
    verdicts=("pick_verdict", "return_verdict"),
    numeric=("moved_mm", "block_x", "block_z"),
    integer=("pick_attempts",),
    success={"pick_verdict": "yes", "return_verdict": "yes"},
)
