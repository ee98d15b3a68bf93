"""The stage driver: runs a task's stages by its transition table, and knows no task.

A task (the pick-and-place of mecharm/runtime/pick_place is the first) declares its
stages, its first stage, its transitions and a body per stage (``Task``). A stage body
returns an ``Outcome``; the task's table maps (stage, outcome) to the next stage; any
failure — a body that raises ``StageFailed``, a motion the safe arm refused, a lost
daemon, a forced stop — leaves through the task's abort stage, after which the trial's
exit path runs (trial.py). Each stage body runs in its own anyio task group and cancel
scope: a forced stop cancels it at once, and nothing it started outlives it.

Every stage start, time and transition goes to the trace and the log, so ``mecharm
replay`` re-drives a recorded trial through this same code (docs/stages.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import anyio

from mecharm.common.envelope import Envelope
from mecharm.common.layout import DataRoot
from mecharm.common.logging import get_logger
from mecharm.runtime.ports import ArmPort, EyesPort
from mecharm.runtime.recorder_link import RecorderLink
from mecharm.runtime.records.outcome import TaskRecords
from mecharm.runtime.records.trace import TraceWriter
from mecharm.runtime.safe_arm import MotionRefused, SafeArm

__all__ = [
    "Attempt",
    "Outcome",
    "StageContext",
    "StageFailed",
    "Task",
    "TrialSetup",
    "describe_error",
    "exit_attempts",
    "run_stages",
]

log = get_logger("mecharm.runtime.engine")


class Outcome(StrEnum):
    """What a stage body returns; a task's table says where each leads."""

    OK = "ok"
    RETRY = "retry"  # try the stage's part again (the pick judged no, attempts left)
    LOST = "lost"  # what the task carried is gone (the block left the jaws): judge where it went
    FAIL = "fail"


class StageFailed(RuntimeError):
    """A stage cannot go on; the message is the trial's abort reason."""


S = TypeVar("S", bound=StrEnum)
C = TypeVar("C", bound="StageContext")


class StageContext(Protocol):
    """What the driver needs of a task's context: where it is, the trace, the recorder,
    the operator's status hooks and the data root's fault."""

    @property
    def trace(self) -> TraceWriter: ...
    @property
    def recorder(self) -> RecorderLink: ...
    @property
    def on_stage(self) -> Callable[[str, str, str], None] | None: ...
    @property
    def on_stage_start(self) -> Callable[[str], None] | None: ...
    @property
    def storage_fault(self) -> Callable[[], str | None]: ...
    @property
    def stage_times(self) -> dict[str, float]: ...
    @property
    def safe(self) -> SafeArm: ...

    def enter(self, stage: Any) -> None:
        """The driver is about to run ``stage``."""
        ...


@dataclass(frozen=True)
class TrialSetup:
    """What the trial (trial.py) hands a task to build its context from: the session's
    resources (``rig``: trial.Rig), the trial's traced ports, its trace, run folder and
    root, the envelope the trial started under, and the operator's status hooks."""

    rig: Any
    arm: ArmPort
    eyes: EyesPort
    trace: TraceWriter
    layout: DataRoot
    run_dir: Path
    envelope: Envelope | None
    on_stage: Callable[[str, str, str], None] | None
    on_stage_start: Callable[[str], None] | None


def _nothing_held(ctx: Any) -> str | None:
    return None


def _nothing_learnt(ctx: Any) -> None:
    return None


@dataclass(frozen=True)
class Task(Generic[S, C]):
    """A task as the driver and the trial run it (docs/tasks.md).

    ``context(setup)``: the task's context for one trial (it writes the header inputs
    replay needs). ``may_stop(ctx)``: whether a storage fault may end the trial at this
    stage boundary (the pick-and-place never stops holding the block: the place goes on to
    the release). ``exit(ctx, arm_alive, reason)``: the task's way out after a stop that
    did not reach ``done`` (a safe pose, and what became of what it held); returns the
    trial's reason, with what it did. ``held(ctx)``: after a stop, None when the gripper
    is empty, else what was seen of what it holds (the operator is asked before the next
    trial opens it). ``learn(ctx)``: save what the trial taught (not after a dry run).
    ``records``: its columns in the records (records/outcome.py). ``nominal_s``: what each
    stage takes on the real rig, for the console.
    """

    name: str
    first: S
    done: S
    abort: S
    transitions: Mapping[tuple[S, Outcome], S]
    bodies: Mapping[S, Callable[[C], Awaitable[Outcome]]]
    exit: Callable[[C, bool, str], Awaitable[str]]
    context: Callable[[TrialSetup], C]
    records: TaskRecords
    #: real-rig seconds each stage takes, by wire name, for the console's expected
    #: durations before the session has timed one (docs/console.md)
    nominal_s: Mapping[str, float] = field(default_factory=dict)
    may_stop: Callable[[C], bool] = lambda ctx: True
    held: Callable[[C], str | None] = _nothing_held
    learn: Callable[[C], None] = _nothing_learnt

    def __post_init__(self) -> None:
        if self.records.task != self.name:
            raise ValueError(f"task {self.name}: its records are task {self.records.task}'s")
        missing = [s.value for s in type(self.first) if s not in self.bodies
                   and s not in (self.done, self.abort)]  # fmt: skip
        if missing:
            raise ValueError(f"task {self.name}: stages without a body: {missing}")

    def next_stage(self, stage: S, outcome: Outcome) -> S:
        """Anything the table does not list (every FAIL) goes to the abort stage."""
        return self.transitions.get((stage, outcome), self.abort)


async def _run_body(
    task: Task[S, C], ctx: C, stage: S, force: asyncio.Event | anyio.Event | None
) -> tuple[Outcome, str]:
    """Run one stage body in its own task group; a set ``force`` cancels it at once.

    The body runs in this task (so its errors come out as themselves, not wrapped in
    an exception group); the task group holds the force watcher and is the stage's
    cancel scope. Errors that are not StageFailed or MotionRefused (daemon lost,
    refusal, camera) become the abort reason, named.
    """
    forced = False
    outcome, reason = Outcome.FAIL, ""
    async with anyio.create_task_group() as tg:
        if force is not None:
            event = force

            async def watch() -> None:
                nonlocal forced
                await event.wait()
                forced = True
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
        try:
            outcome = await task.bodies[stage](ctx)
        except (StageFailed, MotionRefused) as exc:
            outcome, reason = Outcome.FAIL, str(exc)
        except Exception as exc:  # daemon lost, refusal, camera failure: abort with its name
            outcome, reason = Outcome.FAIL, f"{stage.value}: {describe_error(exc)}"
        finally:
            tg.cancel_scope.cancel()  # the watcher, and anything else the stage left running
    if forced:  # whatever the cancelled body raised on its way out, the operator stopped it
        outcome, reason = Outcome.FAIL, f"forced stop during {stage.value} (operator)"
    return outcome, reason


async def run_stages(
    task: Task[S, C], ctx: C, force: asyncio.Event | anyio.Event | None = None
) -> tuple[S, str]:
    """Run ``task`` from its first stage until done or abort; return (last stage reached,
    abort reason or "")."""
    stage = task.first
    while stage not in (task.done, task.abort):
        ctx.enter(stage)
        ctx.trace.stage = stage.value
        ctx.recorder.stage(stage.value)
        if ctx.on_stage_start is not None:
            ctx.on_stage_start(stage.value)
        t0 = time.monotonic()
        # a storage fault ends the trial at the next stage boundary through the exit path,
        # unless the task says it may not stop here
        problem = ctx.storage_fault() if task.may_stop(ctx) else None
        if problem is not None:
            outcome, reason = Outcome.FAIL, f"storage ({problem})"
            log.error("storage_fault", stage=stage.value, reason=problem)
        else:
            outcome, reason = await _run_body(task, ctx, stage, force)
        elapsed = time.monotonic() - t0
        ctx.stage_times[stage.value] = ctx.stage_times.get(stage.value, 0.0) + elapsed
        nxt = task.next_stage(stage, outcome)
        ctx.trace.log("stage_time", {"stage": stage.value, "duration_s": round(elapsed, 4)})
        ctx.trace.write(
            "transition", frm=stage.value, to=nxt.value, outcome=outcome.value, reason=reason
        )
        log.info(
            "stage_done",
            stage=stage.value,
            outcome=outcome.value,
            next=nxt.value,
            reason=reason or None,
            duration_s=round(elapsed, 3),
        )
        if ctx.on_stage is not None:
            ctx.on_stage(stage.value, outcome.value, reason)
        if nxt == task.abort:
            return stage, reason
        stage = nxt
    return task.done, ""


#: one step of a task's way out after a stop: its name and the call; False when it failed
#: (told, not raised: the way out goes on with what it can still do)
Attempt = Callable[[str, Callable[[], Any]], Awaitable[bool]]


def exit_attempts(steps: list[dict[str, Any]]) -> Attempt:
    """The ``attempt`` of a way out: runs a step, records it in ``steps`` (the trace's
    ``exit`` decision) and logs a failure instead of raising it."""

    async def attempt(name: str, fn: Callable[[], Any]) -> bool:
        try:
            await fn()
        except Exception as exc:
            steps.append({"step": name, "ok": False, "error": f"{type(exc).__name__}: {exc}"})
            log.warning("exit_step_failed", step=name, error=str(exc))
            return False
        steps.append({"step": name, "ok": True})
        return True

    return attempt


def describe_error(exc: BaseException) -> str:
    """The abort reason for an error a stage did not expect, named by its kind."""
    from mecharm.runtime.client import (
        ArmNoReply,
        ArmRefused,
        ConnectionLost,
        DaemonBusy,
        DaemonTimeout,
    )

    kinds = {
        ConnectionLost: "daemon connection lost",
        DaemonTimeout: "daemon timeout",
        DaemonBusy: "daemon busy",
        ArmRefused: "arm refused the command",
        ArmNoReply: "arm no reply",
    }
    for cls, label in kinds.items():
        if isinstance(exc, cls):
            return f"{label}: {exc}"
    return f"{type(exc).__name__}: {exc}"
