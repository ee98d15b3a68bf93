"""Drive the real stage machine from a recorded trace and collect its decisions.

Why it reuses the runtime's own code: the point of a replay is to prove that the
code as it is now takes the decisions the recorded trial took. So this runs
``engine.run_stages`` (the task the trace names, pick_place when it names none: the
tasks whose context is pick-and-place's, docs/tasks.md) and the trial's exit path
(``trial.exit_path``) with the
replay ports (feed.py) and the constants the trace recorded — only ``overrides``
(``--set KEY=VALUE``) change them, for "what if" questions. The memories start as
the trace recorded them and are never saved; nothing touches the network or disk.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from mecharm.common.config import ConfigError, describe_errors
from mecharm.common.layout import DEFAULT_TASK
from mecharm.runtime.config import (
    MOVED_SETTINGS,
    REMOVED_SETTINGS,
    RuntimeSettings,
    dotted,
    is_constant,
    nest_flat,
    setting_paths,
)
from mecharm.runtime.engine import run_stages
from mecharm.runtime.lookup.j0 import ArcPose
from mecharm.runtime.lookup.table import FkTable
from mecharm.runtime.memories import CorrectionMemory, HeightMemory
from mecharm.runtime.pick_place import TASK as PICK_PLACE
from mecharm.runtime.pick_place import TrialContext
from mecharm.runtime.ports import StillClock
from mecharm.runtime.tasks import get_task
from mecharm.runtime.trial import Rig, exit_path
from mecharm.tools.replay.compare import DecisionDiff, decisions_of, diff_decisions
from mecharm.tools.replay.feed import (
    ReplayArm,
    ReplayDivergence,
    ReplayEyes,
    ReplayFeed,
    ReplayLink,
    ReplayTrace,
)
from mecharm.tools.replay.tracefile import Recorded, RecordedInput

__all__ = ["ReplayResult", "replay", "replay_settings"]


_NOWHERE = Path(
    "/nonexistent/mecharm-replay"
)  # never read, never written: run_stages does not save


def _memories(recorded: Recorded) -> tuple[CorrectionMemory, HeightMemory]:
    """The memories as the trace recorded them (entries that do not validate are skipped, as on the rig)."""
    corr, height = CorrectionMemory(_NOWHERE / "c.json"), HeightMemory(_NOWHERE / "h.json")
    for mem, entries in (
        (corr, recorded.memories["correction"]),
        (height, recorded.memories["height"]),
    ):
        for key, e in entries.items():
            if mem._valid(e):
                mem.entries[key] = dict(e)
            else:
                mem.skipped.append(key)
    return corr, height


def replay_settings(
    recorded: Recorded, overrides: dict[str, Any] | None = None
) -> tuple[RuntimeSettings, list[str]]:
    """The recorded constants (plus ``overrides``: dotted paths, ``arm.speed``) as settings,
    and notes on keys that no longer/newly exist. Constants of the flat layout from before
    the groups are read into their groups (docs/settings.md).

    Raises ``mecharm.common.config.ConfigError`` naming a bad override or recorded value.
    """
    paths = setting_paths()
    raw = recorded.constants
    notes: list[str] = []
    removed = sorted(k for k in raw if k in REMOVED_SETTINGS)
    if removed:
        notes.append(
            "recorded with settings this code no longer has (replayed with today's behaviour, "
            "its decisions may differ): " + ", ".join(f"{k}={raw[k]!r}" for k in removed)
        )
    consts = dotted(nest_flat({k: v for k, v in raw.items() if k not in REMOVED_SETTINGS}))
    gone = sorted(k for k in consts if k not in paths)
    if gone:
        notes.append(f"constants recorded but unknown to this code (ignored): {', '.join(gone)}")
    new = sorted(p for p in paths if p not in consts and is_constant(p))
    if new:
        notes.append(
            "settings not in the trace (today's defaults used, its decisions may differ): "
            + ", ".join(new)
        )
    values = {k: v for k, v in consts.items() if k in paths}
    # a rule the trace recorded switched off (null) that this code always applies
    always = sorted(k for k, v in values.items() if v is None and not _takes_none(paths[k]))
    if always:
        notes.append(
            "recorded switched off (null), always on in this code (today's defaults used, its "
            "decisions may differ): " + ", ".join(always)
        )
        for k in always:
            del values[k]
    # the trial's task is the trace header's (a trace from before tasks had names: pick_place)
    values["task"] = recorded.header.get("task") or DEFAULT_TASK
    for k, v in (overrides or {}).items():
        path = MOVED_SETTINGS.get(k, k)
        if path in paths and v is None and not _takes_none(paths[path]):
            raise ConfigError(
                f"the trace's constants or --set: {path} = null is not a value this key takes"
            )
        values[path] = v
    nested: dict[str, Any] = {}
    for path, v in values.items():
        group, _, leaf = path.rpartition(".")
        if group:
            nested.setdefault(group, {})[leaf] = v
        else:
            nested[path] = v
    try:
        # no file, no environment: the trace's values and --set only
        settings = RuntimeSettings.model_validate(nested)
    except ValidationError as exc:
        raise ConfigError(
            "invalid configuration (the trace's constants or --set): "
            + describe_errors(exc, RuntimeSettings)
        ) from None
    task = get_task(settings.task)
    if task.context is not PICK_PLACE.context:  # replay builds pick-and-place's context
        raise ConfigError(
            f"the trace is a trial of task {task.name}, whose context is its own: replay "
            "re-drives the tasks built on pick-and-place's context (docs/tasks.md)"
        )
    return settings, notes


def _takes_none(annotation: Any) -> bool:
    try:
        TypeAdapter(annotation or Any).validate_python(None)
    except ValidationError:
        return False
    return True


@dataclass
class ReplayResult:
    """What a replay found; ``identical`` is the verdict ``mecharm replay`` prints."""

    diff: DecisionDiff
    divergence: str | None
    skipped_inputs: list[RecordedInput]
    unused_inputs: list[RecordedInput]
    status: str
    reason: str
    notes: list[str] = field(default_factory=list)
    replayed_events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return (
            self.diff.identical
            and self.divergence is None
            and not self.skipped_inputs
            and not self.unused_inputs
        )


async def replay(
    recorded: Recorded,
    settings: RuntimeSettings,
    table: FkTable,
    arc_pick: ArcPose,
    arc_place: ArcPose,
    notes: list[str] | None = None,
) -> ReplayResult:
    """Run the stage machine on the recorded inputs and compare every decision."""
    trace = ReplayTrace()
    force = asyncio.Event()
    feed = ReplayFeed(recorded, trace, force)
    arm, eyes, link = ReplayArm(feed), ReplayEyes(feed), ReplayLink(feed)
    clock = StillClock()
    corrections, heights = _memories(recorded)
    ctx = TrialContext(
        settings=settings, arm=arm, eyes=eyes, recorder=link, clock=clock, trace=trace,
        table=table, arc_pick=arc_pick, arc_place=arc_place,
        corrections=corrections, heights=heights, storage_fault=feed.storage_fault,
        envelope=recorded.envelope,
    )  # fmt: skip
    # arm liveness at the exit path is an outside fact: the recorded exit step says it
    alive = not any(
        e.get("event") == "decision"
        and e.get("kind") == "exit"
        and isinstance(e.get("value"), dict)
        and e["value"].get("step") == "arm actions skipped"
        for _n, e in recorded.lines
    )
    rig = Rig(settings, arm, eyes, link, clock, table, arc_pick, arc_place, arm_alive=lambda: alive)
    trace.stage = "start"
    task = get_task(settings.task)
    last, reason = await run_stages(task, ctx, force)
    if last is not task.done:
        reason = await exit_path(ctx, rig, reason)
    status = "completed" if last is task.done else "stopped"
    trace.stage = "end"
    trace.result(status, reason)
    feed._drop_past()
    got = decisions_of([(None, e) for e in trace.lines])
    want = decisions_of(recorded.lines)
    return ReplayResult(
        diff=diff_decisions(want, got),
        divergence=str(feed.divergence) if isinstance(feed.divergence, ReplayDivergence) else None,
        skipped_inputs=list(feed.skipped), unused_inputs=list(feed.queue), status=status, reason=reason,
        notes=list(notes or []), replayed_events=trace.lines,
    )  # fmt: skip
