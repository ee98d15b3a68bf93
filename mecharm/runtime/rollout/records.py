"""What a rollout puts in the records (``TaskRecords``, records/outcome.py): the policy,
the place verdict, the control loop's account (ticks run and missed, steps clamped and
refused, why it ended), whether the runtime had to open the gripper where the policy
closed it; folded from the trace like every task's."""

from __future__ import annotations

from typing import Any

from mecharm.runtime.pick_place.records import RECORDS as PICK_PLACE_RECORDS
from mecharm.runtime.records.outcome import TaskRecords, TraceLines

__all__ = ["RECORDS"]

_LOOP = ("ticks", "missed_ticks", "clamped", "refused", "stopped_by")


def _from_trace(lines: TraceLines) -> dict[str, Any]:
    lines = list(lines)
    # where the block and the box were seen, and the place verdict: pick-and-place's fold
    place = PICK_PLACE_RECORDS.from_trace(lines)
    out: dict[str, Any] = {k: place.get(k) for k in ("place_verdict", "place_confidence",
                                                      "block_x", "block_z", "box_x", "box_z")}  # fmt: skip
    out.update(policy="", stopped_by="", put_back="")
    for e in lines:
        ev, kind, value = e.get("event"), e.get("kind"), e.get("value")
        if ev != "decision" or not isinstance(value, dict):
            continue
        if kind == "rollout_policy":
            out["policy"] = str(value.get("policy", ""))
        elif kind == "control_loop":
            out.update(
                ticks=value.get("ticks"), missed_ticks=value.get("missed"),
                clamped=value.get("clamped"), refused=value.get("refused"),
                stopped_by=str(value.get("stopped_by", "")),
            )  # fmt: skip
        elif kind == "rollout_put_back":
            out["put_back"] = "yes" if value.get("opened") else "no"
    return out


_COLUMNS = (
    "policy", "place_verdict", "place_confidence", *_LOOP, "put_back",
    "block_x", "block_z", "box_x", "box_z",
)  # fmt: skip

RECORDS = TaskRecords(
    task="rollout",
    instruction=PICK_PLACE_RECORDS.instruction,
    columns=_COLUMNS,
    from_trace=_from_trace,
    verdicts=("place_verdict", "put_back"),
    numeric=("place_confidence", "block_x", "block_z", "box_x", "box_z"),
    integer=("ticks", "missed_ticks", "clamped", "refused"),
    success={"place_verdict": "yes"},
)
