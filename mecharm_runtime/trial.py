"""One trial end to end: run folder, stage machine, the single exit path, and the records.

Whatever happens in the stages, a trial leaves the same things behind
(docs/runtime.md, "Records"): the arm returned to a safe pose when it can and
fresh mode off, the JSONL trace ending in ``event=result``, ``trial_end`` to the
recorder, the ledger row (after the bounded wait for ``recording_meta.json``) and
the run log, derived from the trace.

One concern: one trial's lifetime; the stages are the task's (pick_place/), the records'
formats in records/.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mecharm_common.envelope import Envelope
from mecharm_common.fsutil import DataRootGuard, StorageFault, describe_os_error
from mecharm_common.layout import DataRoot
from mecharm_common.logging import get_logger
from mecharm_runtime.arm import TracedArm
from mecharm_runtime.config import RuntimeSettings
from mecharm_runtime.engine import run_stages
from mecharm_runtime.eyes import TracedEyes
from mecharm_runtime.lookup.j0 import ArcPose
from mecharm_runtime.lookup.table import FkTable
from mecharm_runtime.memories import CorrectionMemory, HeightMemory
from mecharm_runtime.pick_place import (
    TASK,
    Stage,
    TrialContext,
    look_at_jaws,
    lower_to_mat,
    up_from_mat,
)
from mecharm_runtime.ports import ArmPort, Clock, EyesPort
from mecharm_runtime.recorder_link import RecorderLink
from mecharm_runtime.records.backlog import Backlog
from mecharm_runtime.records.ledger import (
    LedgerError,
    RecordingInfo,
    append_row,
    wait_recording_meta,
)
from mecharm_runtime.records.runlog import build_runlog, iso, write_runlog
from mecharm_runtime.records.trace import TRACE_FORMAT, TraceWriter
from mecharm_runtime.threads import to_thread
from mecharm_runtime.topvideo import TopVideo, top_video_off

__all__ = ["DataRootError", "Rig", "TrialSummary", "exit_path", "next_run_stem", "run_trial"]

log = get_logger("mecharm_runtime.trial")


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

    def envelope(self) -> Envelope | None:
        """The daemon's safety envelope as the arm adapter last learned it (None: none known)."""
        env = getattr(self.arm, "envelope", None)
        return env if isinstance(env, Envelope) else None


@dataclass
class TrialSummary:
    run_stem: str
    status: str
    reason: str
    dry_run: bool
    duration_s: float
    pick_verdict: str
    pick_confidence: float | None
    place_verdict: str
    place_confidence: float | None
    pick_attempts: int
    moves: int
    recording: RecordingInfo
    run_dir: Path
    trace_path: Path
    stage_times: dict[str, float] = field(default_factory=dict)
    scene_seed: int | None = None
    #: records not on disk yet (the data root failed); the service retries them
    records_pending: list[str] = field(default_factory=list)
    #: the trial stopped with the block in the gripper (the arm holds it in the hover)
    block_held: bool = False
    #: with block_held: what the top camera saw at the tip (seen, not_seen, unknown)
    held_evidence: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["recording"] = self.recording.__dict__
        d["run_dir"], d["trace_path"] = str(self.run_dir), str(self.trace_path)
        return d


def next_run_stem(data_root: Path, now: float | None = None) -> str:
    """``run_NNNN_YYYYmmdd_HHMMSS`` with NNNN one above the highest existing run (docs/data-root.md)."""
    return DataRoot(data_root).next_run_stem(now)


async def exit_path(ctx: TrialContext, rig: Rig, reason: str) -> str:
    """The one way out of an aborted trial: safe pose when possible, fresh mode off. Returns
    the trial's reason, with what became of a block the exit path put back."""
    steps: list[dict[str, Any]] = []
    ctx.stage = Stage.ABORT
    ctx.trace.stage = Stage.ABORT.value
    ctx.recorder.stage(Stage.ABORT.value)
    s, st = ctx.settings, ctx.state
    if not rig.arm_alive():
        steps.append({"step": "arm actions skipped", "why": "daemon connection lost"})
        if st.holding and s.release_check:
            await _tell_block_held(ctx, forced=False)
        ctx.trace.decision("exit", steps[-1])
        return reason
    forced = reason.startswith("forced stop")

    async def attempt(name: str, fn: Callable[[], Any]) -> bool:
        try:
            await fn()
        except Exception as exc:
            steps.append({"step": name, "ok": False, "error": f"{type(exc).__name__}: {exc}"})
            log.warning("exit_step_failed", step=name, error=str(exc))
            return False
        steps.append({"step": name, "ok": True})
        return True

    holding = st.holding and s.release_check
    # the pick was judged no for the last time: the jaws are closed on nothing or on a
    # partly held block; put it down where retry_pick would, then HOME as usual
    put_down = (
        holding
        and st.place_approach is None
        and st.pick_verdict is not None
        and st.pick_verdict.verdict == "no"
        and st.pick_pose is not None
        and st.pick_approach is not None
    )
    # a refused release, unattended: the block goes back where it was picked (docs/release.md)
    put_back = (
        holding
        and bool(st.release_refused)
        and s.release_refused == "put_back"
        and st.lifted_at is not None
        and st.pick_pose is not None
        and st.pick_approach is not None
    )
    if forced:
        await attempt("stop", ctx.arm.stop)
    elif put_down:
        await _put_down(ctx, attempt)
    elif put_back:
        await _hold_in_hover(ctx, attempt, steps)
        if st.hovering:
            await _put_back(ctx, attempt)
    elif holding:
        await _hold_in_hover(ctx, attempt, steps)
    else:
        # up first (never drag a low pose sideways), then HOME
        up = st.place_approach if st.place_pose is not None else st.pick_approach
        if st.place_pose is None and ctx.last_commanded in st.pick_path[1:]:
            # low at the pick after pick servo steps: up the way it came down (docs/stages.md)
            ok = await attempt("retreat to approach", lambda: up_from_mat(ctx, "abort: retreat"))
        elif st.place_pose is None and st.pick_path and ctx.last_commanded is None:
            # a servo step did not arrive: the arm is somewhere past the last pose it reached,
            # known only from the readings; up the way it came, each move bounded from there
            ok = await attempt("retreat to approach", lambda: _retrace_up(ctx, "abort: retreat"))
        elif up is not None and (st.pick_pose is not None or st.place_pose is not None):
            ok = await attempt(
                "retreat to approach", lambda: ctx.move(up, s.tol_pick_place, "abort: retreat")
            )
        else:
            ok = True
        if ok:
            await attempt("home", lambda: ctx.move(s.home, s.tol_home, "abort: home"))
    if (st.fresh_mode_on or forced) and await attempt(
        "fresh mode off", lambda: ctx.arm.set_fresh_mode(0)
    ):
        st.fresh_mode_on = False
    if holding and st.holding:
        await _tell_block_held(ctx, forced, attempt)
    ctx.trace.decision("exit", {"forced": forced, "steps": steps})
    if not st.put_back:
        return reason
    if st.held_evidence == "not_seen":  # say what was done, not what was believed
        return reason + "; the gripper was opened on the mat where the block was picked"
    return reason + "; the block was put back on the mat"


async def _put_back(
    ctx: TrialContext, attempt: Callable[[str, Callable[[], Any]], Awaitable[bool]]
) -> None:
    """From the hover over the box back to where the block was picked, the way it came (the
    place approach → the pose the lift ended at → down the pick path), open there, up, HOME.
    Every move is one the arm already made holding this block, each through the guards; a
    failed step leaves the arm where it got to, still holding (told below)."""
    s, st = ctx.settings, ctx.state
    assert st.lifted_at is not None
    lifted = st.lifted_at
    ctx.trace.decision("put_back", {"to": "pick pose", "why": st.release_refused})
    if not await attempt(
        "back over the mat",
        lambda: ctx.move(lifted, ctx.approach_tol, "put back: over the mat", lookup_ok=True),
    ):
        return
    st.hovering = False
    if not await attempt("lower to the mat", lambda: lower_to_mat(ctx, "put back")):
        return
    if not await attempt("open", lambda: ctx.gripper("open", "put back on the mat")):
        return
    st.holding = False
    st.put_back = True
    log.warning("block_put_back", why=st.release_refused)
    if ctx.on_stage is not None:
        ctx.on_stage(Stage.ABORT.value, "block put back on the mat", "")
    if not await attempt("up from the mat", lambda: up_from_mat(ctx, "put back: up")):
        return
    await attempt("home", lambda: ctx.move(s.home, s.tol_home, "put back: home"))


async def _retrace_up(ctx: TrialContext, note: str) -> None:
    """From where a pick move that did not arrive left the arm (``last_measured``) up to the
    pick approach, back through every pose of the pick path (the last one reached included),
    each move near the work: within ``joint_step_max_deg`` and path-checked (docs/safety.md)."""
    s, st = ctx.settings, ctx.state
    assert st.pick_approach is not None
    await ctx.retrace(
        [*reversed(st.pick_path), st.pick_approach], s.tol_pick_place, note, into_box=False
    )


async def _put_down(
    ctx: TrialContext, attempt: Callable[[str, Callable[[], Any]], Awaitable[bool]]
) -> None:
    """After the last failed pick: open at the mat, as retry_pick does."""
    s, st = ctx.settings, ctx.state
    assert st.pick_pose is not None and st.pick_approach is not None
    there = await attempt("lower to the mat", lambda: lower_to_mat(ctx, "abort"))
    if not there or not await attempt("open", lambda: ctx.gripper("open", "abort: put down (mat)")):
        return  # still holding: told below, the arm stays where it got to
    st.holding = False
    if not await attempt("up from the mat", lambda: up_from_mat(ctx, "abort: up")):
        return
    await attempt("home", lambda: ctx.move(s.home, s.tol_home, "abort: home"))


async def _hold_in_hover(
    ctx: TrialContext,
    attempt: Callable[[str, Callable[[], Any]], Awaitable[bool]],
    steps: list[dict[str, Any]],
) -> None:
    """The block is (or may be) in the gripper: never open it at a random place, never carry
    it HOME. Up to the hover above where the arm works (the place approach pose once the
    arm went there, else the pick approach) and stay there (docs/stages.md, "abort")."""
    s, st = ctx.settings, ctx.state
    hover = st.place_approach if st.place_approach is not None else st.pick_approach
    in_box = st.place_approach is not None and bool(st.place_path)

    async def up() -> None:
        assert hover is not None
        if in_box:  # back up the way the arm went in, each move within the continuity bound
            await ctx.retrace(
                [*reversed(st.place_path[:-1]), hover], s.tol_pick_place, "abort: hover"
            )
        else:
            await ctx.move(hover, s.tol_pick_place, "abort: hover")

    if st.hovering:
        steps.append({"step": "hover", "ok": True, "why": "already in the hover"})
    elif hover is not None and await attempt("hover holding the block", up):
        st.hovering = True
    steps.append({"step": "gripper stays closed", "why": "block held; not taken HOME"})


async def _tell_block_held(
    ctx: TrialContext,
    forced: bool,
    attempt: Callable[[str, Callable[[], Any]], Awaitable[bool]] | None = None,
) -> None:
    """Say it on the console and in the log, from what the top camera sees at the tip, not
    only from the runtime's belief (docs/release.md, "Say what was seen"): the block seen in
    the jaws, not seen there (it may have slipped out), or unknown (no look was possible)."""
    st = ctx.state
    where = "in the hover" if st.hovering else ("stopped" if forced else "where it stopped")
    seen = "unknown"
    if st.held_evidence and st.hovering:  # looked in this hover already (the release check)
        seen = st.held_evidence
    elif attempt is not None and not forced:
        box: list[str] = []

        async def look() -> None:
            box.append(await look_at_jaws(ctx))

        if await attempt("look at the jaws", look):
            seen = box[0]
    st.held_evidence = seen
    if seen == "not_seen":
        msg = (
            f"BLOCK NOT SEEN IN THE GRIPPER: the arm stays {where} with the gripper closed; the "
            "runtime last knew it held the block, but the top camera does not see it at the tip "
            "(it may have slipped into the box or onto the mat); look before the next trial "
            "(the next trial opens the gripper at HOME)"
        )
    else:
        what = "seen at the tip by the top camera" if seen == "seen" else "not looked at"
        msg = (
            f"BLOCK STILL IN THE GRIPPER ({what}): the arm stays {where} with the gripper "
            "closed; take the block out by hand before the next trial (the next trial opens "
            "the gripper at HOME)"
        )
    log.error("block_held_at_stop", where=where, forced=forced, evidence=seen)
    if ctx.on_stage is not None:
        ctx.on_stage(Stage.ABORT.value, "holding", msg)


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
    root = Path(s.data_root)
    try:
        guard = rig.guard or DataRootGuard(root, s.require_mount)
        guard.ensure(probe=True)
    except StorageFault as exc:
        raise DataRootError(str(exc)) from None
    layout = DataRoot(root)
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
        run_stem=stem,
        dry_run=rig.dry_run,
        scene_seed=scene_seed,
        constants=s.constants(),
    )
    trace.input("table_checksum", rig.table.checksum)
    envelope = rig.envelope()
    if envelope is not None:  # a header input, as the table: replay guards with the same one
        trace.input("envelope", envelope.to_wire())
    ctx = TrialContext(
        settings=s,
        arm=TracedArm(rig.arm, trace),
        eyes=TracedEyes(rig.eyes, trace),
        recorder=rig.recorder,
        clock=rig.clock,
        trace=trace,
        table=rig.table,
        arc_pick=rig.arc_pick,
        arc_place=rig.arc_place,
        corrections=CorrectionMemory(layout.correction_memory, root=layout.root),
        heights=HeightMemory(layout.height_memory, root=layout.root),
        run_dir=run_dir,
        on_stage=on_stage,
        on_stage_start=on_stage_start,
        storage_fault=trace.check_storage,
        envelope=envelope,
    )
    trace.input("memories", {"correction": ctx.corrections.entries, "height": ctx.heights.entries})
    rig.eyes.start_trial(run_dir)
    if rig.top_video is not None:  # the run folder exists, the arm has not moved yet
        rig.top_video.start(layout.top_video(stem), layout.top_frame_log(stem))
    # every way out that does not reach the stop below (a cancel, any exception) takes the
    # tap off the camera and lets the writer close alone (docs/top-camera.md)
    top_video_stopped = False
    try:
        rig.recorder.trial_start(stem)
        log.info("trial_start", run_stem=stem, dry_run=rig.dry_run, scene_seed=scene_seed)
        try:
            last, reason = await run_stages(TASK, ctx, force)
            if last is not Stage.DONE:
                reason = await exit_path(ctx, rig, reason)
        except asyncio.CancelledError:
            reason = "cancelled"
            trace.result("stopped", reason)
            rig.recorder.trial_end(stem)
            raise
        status = "completed" if last is Stage.DONE else "stopped"
        backlog = rig.backlog
        if not rig.dry_run:  # a dry run never teaches the memories (its tip is modelled)

            def save_memories() -> None:
                ctx.corrections.save()
                ctx.heights.save()

            backlog.attempt(guard, stem, "memories", save_memories)
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
            timeout_s=s.recording_wait_s,
            poll_s=s.recording_poll_s,
        )
    else:
        rec = RecordingInfo(status="none", note="recorder disabled")
    st = ctx.state
    scene = st.scene
    summary = TrialSummary(
        run_stem=stem,
        status=status,
        reason=reason,
        dry_run=rig.dry_run,
        duration_s=duration,
        pick_verdict=st.pick_verdict.verdict if st.pick_verdict else "",
        pick_confidence=st.pick_verdict.confidence if st.pick_verdict else None,
        place_verdict=st.place_verdict.verdict if st.place_verdict else "",
        place_confidence=st.place_verdict.confidence if st.place_verdict else None,
        pick_attempts=st.pick_attempts,
        moves=ctx.safe.moves,
        recording=rec,
        run_dir=run_dir,
        trace_path=trace_path,
        stage_times=dict(st.stage_times),
        scene_seed=scene_seed,
        block_held=st.holding and status == "stopped",
        held_evidence=st.held_evidence if st.holding and status == "stopped" else "",
    )
    row = {
        "run_stem": stem, "started_at": iso(started_wall), "ended_at": iso(rig.clock.wall()),
        "duration_s": round(duration, 3), "status": status, "reason": reason, "dry_run": rig.dry_run,
        "scene_seed": scene_seed, "pick_verdict": summary.pick_verdict, "pick_confidence": summary.pick_confidence,
        "place_verdict": summary.place_verdict, "place_confidence": summary.place_confidence,
        "pick_attempts": st.pick_attempts,
        "block_x": scene.block_xz[0] if scene and scene.block_xz else None,
        "block_z": scene.block_xz[1] if scene and scene.block_xz else None,
        "box_x": scene.box_xz[0] if scene and scene.box_xz else None,
        "box_z": scene.box_xz[1] if scene and scene.box_xz else None,
        "recording_path": rec.path, "recording_fps": rec.fps, "recording_frames": rec.frames,
        "recording_status": rec.status,
    }  # fmt: skip
    ledger_error = None
    try:
        backlog.attempt(guard, stem, "ledger row", lambda: append_row(layout.ledger, row))
    except LedgerError as exc:
        ledger_error = str(exc)
        log.error("ledger_append_failed", run_stem=stem, error=ledger_error, row=row)
    runlog = build_runlog(trace.lines, trace_name=trace_path.name, after={
        "recording": rec.__dict__, "ended_at": row["ended_at"], "duration_s": round(duration, 3),
        "pick_verdict": summary.pick_verdict, "place_verdict": summary.place_verdict,
        "pick_attempts": st.pick_attempts, "ledger_error": ledger_error,
        "storage_fault": trace.fault,
    })  # fmt: skip
    runlog["top_video"], runlog["rig_id"] = top_video, s.rig_id
    backlog.attempt(guard, stem, "run log", lambda: write_runlog(layout.runlog(stem), runlog))
    summary.records_pending = [i.what for i in backlog.items if i.run_stem == stem]
    log.info(
        "trial_end",
        run_stem=stem,
        status=status,
        reason=reason or None,
        duration_s=round(duration, 2),
        pick=summary.pick_verdict,
        place=summary.place_verdict,
        recording=rec.status,
        records_pending=summary.records_pending or None,
    )
    return summary
