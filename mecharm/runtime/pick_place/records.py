"""What a pick-and-place trial puts in the records (``TaskRecords``, records/outcome.py).

Its ledger columns — the two verdicts with their confidences, the pick attempts, where the
block and the box were seen — are folded from the trial's trace: the last pick verdict
(or its revision by a later recheck), the last place verdict, one attempt per run of
lift_and_judge (a judgement that failed, on a frozen camera say, is an attempt too), the
last scene seen. The same fold gives the row of a trial that ended normally
and of one a crash cut (records/reconcile.py), so the two never disagree.
"""

from __future__ import annotations

from typing import Any

from mecharm.runtime.records.outcome import TaskRecords, TraceLines

__all__ = ["RECORDS", "pick_outcome"]


def _xz(v: Any, i: int) -> float | None:
    if isinstance(v, list | tuple) and len(v) == 2 and isinstance(v[i], int | float):
        return float(v[i])
    return None


def pick_outcome(lines: TraceLines) -> dict[str, Any]:
    """The pick's columns of a trial whose pick is pick-and-place's (lift_return's too):
    ``pick_verdict`` and ``pick_confidence`` (the last, or its revision by a later recheck)
    and ``pick_attempts``."""
    out: dict[str, Any] = {"pick_verdict": "", "pick_confidence": None}
    judged = lifts = 0
    for e in lines:
        ev, kind, value = e.get("event"), e.get("kind"), e.get("value")
        if ev == "transition" and e.get("frm") == "lift_and_judge":
            lifts += 1  # an attempt whose judgement failed (a frozen camera) counts too
        elif ev == "input" and kind == "pick_verdict" and isinstance(value, dict):
            out.update(
                pick_verdict=value.get("verdict", ""), pick_confidence=value.get("confidence")
            )
            judged += 1
        elif ev == "decision" and kind == "pick_recheck" and isinstance(value, dict):
            revised = value.get("pick_verdict") if value.get("revised") else None
            if isinstance(revised, dict):  # the pick judged again from later evidence
                out.update(
                    pick_verdict=revised.get("verdict", ""),
                    pick_confidence=revised.get("confidence"),
                )
    out["pick_attempts"] = max(judged, lifts)
    return out


def _from_trace(lines: TraceLines) -> dict[str, Any]:
    lines = list(lines)
    out: dict[str, Any] = {**pick_outcome(lines), "place_verdict": ""}
    block = box = None
    for e in lines:
        ev, kind, value = e.get("event"), e.get("kind"), e.get("value")
        if not isinstance(value, dict):
            continue
        if ev == "input" and kind == "place_verdict":
            out["place_verdict"] = value.get("verdict", "")
            out["place_confidence"] = value.get("confidence")
        elif ev == "input" and kind == "scene" and value.get("ok"):
            block, box = value.get("block_xz"), value.get("box_xz")
    out.update(block_x=_xz(block, 0), block_z=_xz(block, 1), box_x=_xz(box, 0), box_z=_xz(box, 1))
    return out


_COLUMNS = (
    "pick_verdict", "pick_confidence", "place_verdict", "place_confidence", "pick_attempts",
    "block_x", "block_z", "box_x", "box_z",
)  # fmt: skip

RECORDS = TaskRecords(
    task="pick_place",
    instruction="put the red block in the white box",
    columns=_COLUMNS,
    from_trace=_from_trace,
    verdicts=("pick_verdict", "place_verdict"),
    numeric=("pick_confidence", "place_confidence", "block_x", "block_z", "box_x", "box_z"),
    integer=("pick_attempts",),
    success={"pick_verdict": "yes", "place_verdict": "yes"},
)
