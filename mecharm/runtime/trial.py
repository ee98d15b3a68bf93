"""One trial end to end: run folder, stage machine, the single exit path, and the records.

Whatever happens in the stages, a trial leaves the same things behind
(docs/runtime.md, "Records"): the arm returned to a safe pose when it can and
fresh mode off, the JSONL trace ending in ``event=result``, ``trial_end`` to the
recorder, the ledger row (after the bounded wait for ``recording_meta.json``) and
the run log, derived from the trace.

The trial knows no task: it runs the one its settings name (``task``; mecharm/runtime/tasks.py),
which brings its stages, its context, its way out after a stop (``Task.exit``) and its
columns in the records (``Task.records``); the records' formats are records/'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mecharm.cameras.base import CameraSource
from mecharm.common.envelope import Envelope
from mecharm.common.fsutil import DataRootGuard, StorageFault, describe_os_error
from mecharm.common.layout import DataRoot
from mecharm.common.logging import get_logger
from mecharm.runtime.arm import TracedArm
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.engine import Task, TrialSetup, run_stages
from mecharm.runtime.eyes import TracedEyes
from mecharm.runtime.lookup.j0 import ArcPose
from mecharm.runtime.lookup.table import FkTable
from mecharm.runtime.ports import ArmPort, Clock, EyesPort
from mecharm.runtime.recorder_link import RecorderLink
from mecharm.runtime.records.backlog import Backlog
from mecharm.runtime.records.ledger import (
    LedgerError,
    RecordingInfo,
    append_row,
    wait_recording_meta,
)
from mecharm.runtime.records.runlog import build_runlog, iso, write_runlog
from mecharm.runtime.records.trace import TRACE_FORMAT, TraceWriter
from mecharm.runtime.tasks import get_task
from mecharm.runtime.threads import to_thread
from mecharm.runtime.topvideo import TopVideo, top_video_off

__all__ = ["DataRootError", "Rig", "TrialSummary", "exit_path", "next_run_stem", "run_trial"]

log = get_logger("mecharm.runtime.trial")


class DataRootError(RuntimeError):
    """The data root failed the mount guard: nothing is written (never a local fallback)."""


@dataclass
class Rig:
    """The long-lived resources a service session runs its trials with."""

    settings: RuntimeSettings
    arm: ArmPort
    eyes: EyesPort
    recorder: RecorderLink
    clock: Clock
    table: FkTable
    arc_pick: ArcPose
    arc_place: ArcPose
    arm_alive: Callable[[], bool] = lambda: True
    dry_run: bool = False
    #: the session's data-root guard and the records still waiting for it (docs/reliability.md)
    guard: DataRootGuard | None = None
    backlog: Backlog = field(default_factory=Backlog)
    #: the top camera's recording (None: top_video off); observes only (docs/top-camera.md)
    top_video: TopVideo | None = None
    #: the top camera itself, for a task that reads frames of its own (a policy's rollout,
    #: docs/rollouts.md); None with a caller's eyes or in a replay
    camera: CameraSource | None = None

    @property
    def task(self) -> Task[Any, Any]:
        """The task the session runs (``settings.task``)."""
        return get_task(self.settings.task)

    def envelope(self) -> Envelope | None:
        """The daemon's safety envelope as the arm adapter last learned it (None: none known)."""
        env = getattr(self.arm, "envelope", None)
        return env if isinstance(env, Envelope) else None


@dataclass
class TrialSummary:
    """One trial as the operator, the service and the checks see it; the task's own columns
    are in ``outcome`` (its ledger columns, records/outcome.py)."""

    run_stem: str
    status: str
    reason: str
    dry_run: bool
    duration_s: float
    task: str
    #: the task's ledger columns of this trial (pick_place: pick_verdict, place_verdict, ...)
    outcome: dict[str, Any]
    #: a success by the task's rule (pick_place: both verdicts yes)
    succeeded: bool
    #: the verdicts in a few words for a trial line (``pick yes place no``)
    verdicts: str
    moves: int
    recording: RecordingInfo
    run_dir: Path
    trace_path: Path
    stage_times: dict[str, float] = field(default_factory=dict)
    scene_seed: int | None = None
    #: records not on disk yet (the data root failed); the service retries them
    records_pending: list[str] = field(default_factory=list)
    #: the trial stopped with something in the gripper (pick_place: the block, in the hover)
    held: bool = False
    #: with held: what the top camera saw at the tip (seen, not_seen, unknown)
    held_evidence: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["recording"] = self.recording.__dict__
        d["run_dir"], d["trace_path"] = str(self.run_dir), str(self.trace_path)
        return d


def next_run_stem(data_root: Path, now: float | None = None) -> str:
    """``run_NNNN_YYYYmmdd_HHMMSS`` with NNNN one above the highest existing run (docs/data-root.md)."""
    return DataRoot(data_root).next_run_stem(now)


async def exit_path(ctx: Any, rig: Rig, reason: str) -> str:
    """The task's way out of a stopped trial (``Task.exit``), told whether the arm is still
    reachable. Returns the trial's reason, with what the exit path did to what it held."""
    return await rig.task.exit(ctx, rig.arm_alive(), reason)


async def run_trial(
    rig: Rig,
    *,
    force: asyncio.Event | None = None,
    scene_seed: int | None = None,
    on_stage: Callable[[str, str, str], None] | None = None,
    on_stage_start: Callable[[str], None] | None = None,
    on_trace: Callable[[dict[str, Any]], None] | None = None,
) -> TrialSummary:
    """Run one trial. Raises DataRootError (before the arm moves) when the root is unusable.

    ``on_stage_start(stage)``, ``on_stage(stage, outcome, reason)`` and ``on_trace(line)``
    (every trace line as written) let the operator's console follow the trial; they are told,
    never asked (docs/console.md).

    A storage fault later on never raises: the trial ends safely with reason
    ``storage (...)`` and what could not be written waits in ``rig.backlog``.
    """
    s = rig.settings
    task = rig.task
    root = Path(s.data_root)
    try:
        guard = rig.guard or DataRootGuard(root, s.require_mount)
        guard.ensure(probe=True)
    except StorageFault as exc:
        raise DataRootError(str(exc)) from None
    layout = DataRoot(root, task.name)
    stem = layout.next_run_stem()
    run_dir = layout.run_dir(stem)
    trace_path = layout.trace(stem)
    try:
        guard.mkdir(run_dir, exist_ok=False)
        trace = TraceWriter(trace_path, guard, on_line=on_trace)
    except (OSError, StorageFault) as exc:
        raise DataRootError(describe_os_error(exc, f"creating {run_dir}")) from None
    started_wall = rig.clock.wall()
    t0 = rig.clock.now()
    trace.stage = "start"
    trace.write(
        "trial",
        format=TRACE_FORMAT,
        task=task.name,
        run_stem=stem,
        dry_run=rig.dry_run,
        scene_seed=scene_seed,
        constants=s.constants(),
    )
    trace.input("table_checksum", rig.table.checksum)
    envelope = rig.envelope()
    if envelope is not None:  # a header input, as the table: replay guards with the same one
        trace.input("envelope", envelope.to_wire())
    ctx = task.context(TrialSetup(
        rig=rig, arm=TracedArm(rig.arm, trace), eyes=TracedEyes(rig.eyes, trace), trace=trace,
        layout=layout, run_dir=run_dir, envelope=envelope, on_stage=on_stage,
        on_stage_start=on_stage_start,
    ))  # fmt: skip
    rig.eyes.start_trial(run_dir)
    if rig.top_video is not None:  # the run folder exists, the arm has not moved yet
        rig.top_video.start(layout.top_video(stem), layout.top_frame_log(stem))
    # every way out that does not reach the stop below (a cancel, any exception) takes the
    # tap off the camera and lets the writer close alone (docs/top-camera.md)
    top_video_stopped = False
    try:
        rig.recorder.trial_start(stem, task.name)
        log.info("trial_start", run_stem=stem, dry_run=rig.dry_run, scene_seed=scene_seed)
        try:
            last, reason = await run_stages(task, ctx, force)
            if last is not task.done:
                reason = await exit_path(ctx, rig, reason)
        except asyncio.CancelledError:
            reason = "cancelled"
            trace.result("stopped", reason)
            rig.recorder.trial_end(stem)
            raise
        status = "completed" if last is task.done else "stopped"
        backlog = rig.backlog
        if not rig.dry_run:  # a dry run never teaches the memories (its tip is modelled)
            backlog.attempt(guard, stem, "memories", lambda: task.learn(ctx))
        trace.stage = "end"
        trace.result(status, reason)
        if trace.pending:
            backlog.add(stem, "trace", trace.recover, trace.fault or "")
        rig.recorder.trial_end(stem)
        duration = rig.clock.now() - t0
        # after the last stage, outside the trial's time; never raises (docs/top-camera.md)
        top_video = (
            await to_thread(rig.top_video.stop)
            if rig.top_video is not None
            else top_video_off("top_video off")
        )
        top_video_stopped = True
    finally:
        if not top_video_stopped and rig.top_video is not None:
            rig.top_video.abandon()
    settle = getattr(rig.eyes, "settle", None)  # the last stage image (docs/stage-images.md)
    if settle is not None:
        await settle()
    if rig.recorder.enabled:
        rec = await wait_recording_meta(
            layout.recording(stem).dir,
            root,
            timeout_s=s.recorder.recording_wait_s,
            poll_s=s.recorder.recording_poll_s,
        )
    else:
        rec = RecordingInfo(status="none", note="recorder disabled")
    outcome = task.records.outcome(trace.lines)
    held = task.held(ctx) if status == "stopped" else None
    summary = TrialSummary(
        run_stem=stem,
        status=status,
        reason=reason,
        dry_run=rig.dry_run,
        duration_s=duration,
        task=task.name,
        outcome=outcome,
        succeeded=task.records.succeeded(outcome),
        verdicts=task.records.describe(outcome),
        moves=ctx.safe.moves,
        recording=rec,
        run_dir=run_dir,
        trace_path=trace_path,
        stage_times=dict(ctx.stage_times),
        scene_seed=scene_seed,
        held=held is not None,
        held_evidence=held or "",
    )
    row = {
        "run_stem": stem, "started_at": iso(started_wall), "ended_at": iso(rig.clock.wall()),
        "duration_s": round(duration, 3), "status": status, "reason": reason, "dry_run": rig.dry_run,
        "scene_seed": scene_seed, **outcome,
        "recording_path": rec.path, "recording_fps": rec.fps, "recording_frames": rec.frames,
        "recording_status": rec.status,
    }  # fmt: skip
    ledger_error = None
    try:
        backlog.attempt(
            guard, stem, "ledger row",
            lambda: append_row(layout.ledger, row, task.records.ledger_columns),
        )  # fmt: skip
    except LedgerError as exc:
        ledger_error = str(exc)
        log.error("ledger_append_failed", run_stem=stem, error=ledger_error, row=row)
    runlog = build_runlog(trace.lines, trace_name=trace_path.name, after={
        "recording": rec.__dict__, "ended_at": row["ended_at"], "duration_s": round(duration, 3),
        "task": task.name, **outcome, "ledger_error": ledger_error, "storage_fault": trace.fault,
    })  # fmt: skip
    runlog["top_video"], runlog["rig_id"], runlog["tags"] = top_video, s.rig_id, list(s.tags)
    backlog.attempt(guard, stem, "run log", lambda: write_runlog(layout.runlog(stem), runlog))
    summary.records_pending = [i.what for i in backlog.items if i.run_stem == stem]
    log.info(
        "trial_end",
        run_stem=stem,
        status=status,
        reason=reason or None,
        duration_s=round(duration, 2),
        task=task.name,
        verdicts=summary.verdicts or None,
        recording=rec.status,
        records_pending=summary.records_pending or None,
    )
    return summary
