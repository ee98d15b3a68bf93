"""The long-running runtime: set up the rig once, then run trials one after another.

Life cycle (uvicorn-style): ``open_rig`` (rigsetup.py: FK table, arcs, top camera, daemon,
recorder link) → trials → close. Signals: the first Ctrl-C lets the current trial
finish and then stops (the console says so at once); the second stops the arm at once
(the trial aborts through its exit path with ``stop`` instead of a retreat). A daemon
lost during a trial aborts that trial; the service reconnects only *between* trials,
and says so. Everything the operator reads goes through the console (console.py,
docs/console.md); each trial's Rerun file is built in the background (viewjobs.py).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import anyio

from mecharm.common.dirlock import DirBusyError, lock_dir, unlock_dir
from mecharm.common.fsutil import DataRootGuard, StorageFault, describe_os_error
from mecharm.common.layout import DataRoot
from mecharm.common.logging import get_logger
from mecharm.common.shutdown import ShutdownSignals
from mecharm.runtime.arm import DaemonArm
from mecharm.runtime.client import DaemonClient, DaemonError
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.console import RuntimeConsole, recorder_heartbeat
from mecharm.runtime.lookup import default_table_path
from mecharm.runtime.memories import HeldBlockMemory
from mecharm.runtime.recorder_link import RecorderLink, RecorderProbe, recording_text
from mecharm.runtime.records.ledger import check_ledger_ready, check_ledger_row
from mecharm.runtime.records.reconcile import INTERRUPTED, reconcile_run_folders
from mecharm.runtime.rigsetup import (
    RecorderRequired,
    check_envelope,
    open_rig,
)
from mecharm.runtime.simcontrol import SimControlError
from mecharm.runtime.tasks import get_task, task_records
from mecharm.runtime.trial import DataRootError, Rig, TrialSummary, run_trial
from mecharm.runtime.viewjobs import ViewJobs

__all__ = [
    "ServiceReport",
    "check_recorder",
    "run_service",
    "session_console",
    "summary_line",
]

log = get_logger("mecharm.runtime.service")


def summary_line(t: TrialSummary, recorder: RecorderLink | None = None) -> str:
    """One line per trial; ``recorder``: the session's link, so a trial without side video
    says why (recorder_link.recording_text)."""
    rec_txt = recording_text(t.recording, recorder)
    verdicts = f"; {t.verdicts}" if t.verdicts else ""
    why = f" ({t.reason})" if t.reason else ""
    pending = f"; NOT WRITTEN YET: {', '.join(t.records_pending)}" if t.records_pending else ""
    return (
        f"{t.run_stem}: {t.status}{why}{verdicts}; {t.duration_s:.1f}s; {t.moves} moves; "
        f"{rec_txt}{pending}"
    )


def session_console(settings: RuntimeSettings, out: TextIO | None = None) -> RuntimeConsole:
    """The operator's console on ``out`` (stdout); its status line only on a terminal, and
    not when a question may be asked on it mid-trial (it would redraw over the question)."""
    asks = settings.confirm or settings.judge == "human" or settings.judge.vlm_ask_human
    return RuntimeConsole(
        out or sys.stdout,
        live=False if asks else None,
        dry_run=settings.dry_run,
        nominal_s=get_task(settings.task).nominal_s,
    )


@dataclass
class ServiceReport:
    trials: list[TrialSummary] = field(default_factory=list)
    stopped_by: str = ""
    #: the data root failed and the session stopped for it (the CLI exits with its own code)
    storage_problem: str = ""
    #: records that never reached the data root (empty when none were lost)
    records_lost: str = ""

    @property
    def completed(self) -> int:
        return sum(t.status == "completed" for t in self.trials)


async def wait_for_storage(
    rig: Rig, settings: RuntimeSettings, stop: asyncio.Event | anyio.Event, out: TextIO
) -> str | None:
    """Before a trial: the data root must take writes and the backlog must be written.

    Returns None when the next trial may start, else why the session stops. Waits at
    most ``storage_wait_s`` for the operator to free space or plug the SSD back in,
    saying so once on the console (docs/reliability.md, "Storage faults").
    """
    guard, backlog = rig.guard, rig.backlog
    if guard is None:
        return None
    deadline = time.monotonic() + settings.storage_wait_s
    told = False
    while True:
        problem = None if guard.rebind() else guard.problem(probe=True) or "data root unusable"
        if problem is None:
            written = backlog.flush(guard)
            if written:
                print(f"data root ok: wrote {written} pending record(s)", file=out, flush=True)
            if not backlog:
                if told:
                    log.info("storage_back")
                return None
            problem = f"{len(backlog)} record(s) still pending: {backlog.items[0].error}"
        if not told:
            log.error("storage_wait", reason=problem, wait_s=settings.storage_wait_s)
            print(
                f"data root unwritable: {problem}; next trial waits up to "
                f"{settings.storage_wait_s:g} s for it (free space or reconnect the disk; "
                "Ctrl-C stops)",
                file=out,
                flush=True,
            )
            told = True
        left = deadline - time.monotonic()
        if stop.is_set() or left <= 0:
            return problem
        await anyio.sleep(min(0.5, left))


async def run_service(
    settings: RuntimeSettings,
    *,
    signals: ShutdownSignals | None = None,
    out: TextIO | None = None,
    confirm: Callable[[], Awaitable[bool]] | None = None,
    between_trials: Callable[[int], Awaitable[int | None]] | None = None,
    console: RuntimeConsole | None = None,
    view_module: str | None = None,
    resolve_held: Callable[[], Awaitable[bool]] | None = None,
) -> ServiceReport:
    """Run ``settings.trials`` trials (or until stopped). ``between_trials(i)`` may prepare the
    next scene and return its seed; ``confirm()`` is asked before every trial but the first.
    ``console``: where the operator reads what happens (default: one on ``out``, stdout).
    ``view_module``: the Rerun tool run after each trial (tests point it elsewhere).
    ``resolve_held()``: after a trial that stopped with the block in the gripper, asks the
    operator to take it out; True goes on with the session (None or False: it stops)."""
    con = console or session_console(settings, out)
    out = con.writer
    sigs = signals or ShutdownSignals()
    report = ServiceReport()
    try:  # before any set-up: never write anywhere else
        guard = DataRootGuard(Path(settings.data_root), settings.require_mount)
    except StorageFault as exc:
        raise DataRootError(str(exc)) from None
    links_out = DataRoot(Path(settings.data_root)).links_out()
    if links_out:  # a folder symlinked out of the root: refused before the arm moves
        raise DataRootError("; ".join(links_out))
    # one runtime per data root: its run stems, ledger rows and the reconciliation below
    # assume no other runtime is writing there (the lock goes with the process, kill -9 too)
    try:
        root_lock = lock_dir(guard.mkdir(DataRoot(Path(settings.data_root)).runs))
    except DirBusyError:
        raise DataRootError(
            f"another mecharm-runtime is running on the data root {settings.data_root} (it "
            "holds the lock on its runs folder); one runtime per data root: stop it first"
        ) from None
    except (OSError, StorageFault) as exc:
        raise DataRootError(describe_os_error(exc, "locking the runs folder")) from None
    try:
        return await _locked_session(
            settings, guard, con, out, sigs, report, view_module, confirm, between_trials,
            resolve_held,
        )  # fmt: skip
    finally:
        unlock_dir(root_lock)


async def _locked_session(
    settings: RuntimeSettings,
    guard: DataRootGuard,
    con: RuntimeConsole,
    out: TextIO,
    sigs: ShutdownSignals,
    report: ServiceReport,
    view_module: str | None,
    confirm: Callable[[], Awaitable[bool]] | None,
    between_trials: Callable[[int], Awaitable[int | None]] | None,
    resolve_held: Callable[[], Awaitable[bool]] | None,
) -> ServiceReport:
    """The session once this runtime holds the data root: the start-up checks that read
    and write its records, then the trials."""
    # a ledger the trials could not append to stops the run before the arm moves
    # (docs/runtime.md, "Start-up checks"); so does a trial whose row did not reach it
    records = task_records(settings.task)
    ledger = DataRoot(Path(settings.data_root), settings.task).ledger
    check_ledger_ready(ledger, records.ledger_columns)
    # every run folder on the books: a trial cut by kill -9 or a power loss gets its row
    # (docs/runtime.md, "Interrupted trials")
    try:
        reconciled = reconcile_run_folders(Path(settings.data_root), task_records)
    except OSError as exc:
        raise DataRootError(describe_os_error(exc, "writing the ledger")) from None
    for r in reconciled:
        con.line(
            f"{r.run_stem}: no ledger row, now on the books as {r.status} "
            f"(recording {r.recording_status}): {r.reason}"
        )

    told = sigs.on_first, sigs.on_force
    sigs.on_first, sigs.on_force = con.stop_requested, con.force_requested
    views = ViewJobs(
        Path(settings.data_root), con.line, module=view_module, guard=guard, task=settings.task
    )
    fk_table = default_table_path(Path(settings.fk_dir))
    if not fk_table.is_file():
        # the first start builds it (docs/lookup.md): seconds here, minutes on a Pi, with
        # nothing else on the console meanwhile
        con.line(
            f"building the FK table (first start, {fk_table}): seconds here, minutes on a Pi ..."
        )
    try:
        async with open_rig(settings, guard) as (rig, client):
            if con.heartbeat is None:  # the recorder's last probe (docs/console.md)
                con.heartbeat = lambda: recorder_heartbeat(getattr(rig, "recorder", None))
            cut = [r.run_stem for r in reconciled if r.status == INTERRUPTED]
            rig.recorder.supersedes = cut[-1] if cut else None
            probe = await check_recorder(rig, settings, out)
            if probe is not None and probe.ok and probe.recording and not cut:
                # not a trial this runtime took over: its first trial_start is refused
                # while that trial's runtime is alive (docs/recorder.md, "Sessions")
                log.warning("recorder_busy", detail=probe.detail)
                con.line(
                    "side video: the recorder is recording a trial of another runtime "
                    "session; this session's trials get no side video until it ends"
                )
            con.start(settings.trials, rig.settings.scale)  # the daemon's, once connected
            # before the first trial: one line for a Rerun part that cannot run here
            views.start(
                settings.viewing.rerun_after_trial,
                settings.viewing.display,
                settings.viewing.display_url,
            )
            try:
                await _trials(
                    rig,
                    client,
                    settings,
                    sigs,
                    report,
                    con,
                    views,
                    confirm,
                    between_trials,
                    resolve_held,
                )
            finally:
                _account_backlog(rig, report, out)
                last = report.trials[-1] if report.trials else None
                con.session_end(
                    report.stopped_by,
                    last.run_stem if last else None,
                    bool(last and last.held),
                )
                await views.finish(VIEW_FINISH_WAIT_S, give_up=sigs.force.is_set)
    finally:
        con.close()
        sigs.on_first, sigs.on_force = told
    return report


#: at the end of a session, how long to wait for the trials' Rerun files still being built
VIEW_FINISH_WAIT_S = 60.0


async def check_recorder(rig: Rig, settings: RuntimeSettings, out: TextIO) -> RecorderProbe | None:
    """Before the first trial (the arm has not moved): prove a recorder listens and writes into
    this data root (docs/recorder.md, "Ping: proving the data root"). When none does, a loud
    warning on the console and in the log naming what was found and what to do, or, with
    ``require_recorder``, RecorderRequired (exit 8). Nothing when the recorder is off."""
    link = rig.recorder
    if not link.enabled:
        return None
    probe = await link.probe(settings.recorder.probe_timeout_s)
    if probe.ok:
        log.info("recorder_ok", detail=probe.detail, root=probe.root, rtt_ms=probe.rtt_ms)
        print(f"side video: {probe.detail}", file=out, flush=True)
        return probe
    if settings.recorder.required:
        log.error("recorder_required", reason=probe.detail, why=probe.why, fix=probe.fix)
        raise RecorderRequired(f"{probe.sentence()} (recorder.required is set)")
    muted = ""
    if link.muted and probe.root:  # it would record into its own root: it gets no events
        where = DataRoot(Path(probe.root)).recording("run_STEM").dir
        muted = (
            "  it gets no trial events from this session (its video would have gone to "
            f"{where}, a root this session's ledger does not index)\n"
        )
    log.warning(
        "recorder_not_ready", reason=probe.detail, why=probe.why, fix=probe.fix, muted=link.muted
    )
    print(
        f"WARNING: NO SIDE VIDEO: {probe.detail}\n"
        f"  why: {probe.why}\n"
        f"  do:  {probe.fix}\n"
        f"{muted}"
        "  trials run without side video; --require-recorder refuses to start instead",
        file=out,
        flush=True,
    )
    return probe


def _account_backlog(rig: Rig, report: ServiceReport, out: TextIO) -> None:
    """At exit: one last try for the pending records; what is left is reported lost, with counts."""
    if not rig.backlog or rig.guard is None:
        return
    if rig.guard.rebind():
        rig.backlog.flush(rig.guard)
    if rig.backlog:
        report.records_lost = rig.backlog.describe()
        log.error("records_lost", count=len(rig.backlog), detail=report.records_lost)
        print(f"RECORDS LOST (data root unwritable): {report.records_lost}", file=out, flush=True)


async def _trials(
    rig: Rig,
    client: DaemonClient | None,
    settings: RuntimeSettings,
    sigs: ShutdownSignals,
    report: ServiceReport,
    con: RuntimeConsole,
    views: ViewJobs,
    confirm: Callable[[], Awaitable[bool]] | None,
    between_trials: Callable[[int], Awaitable[int | None]] | None,
    resolve_held: Callable[[], Awaitable[bool]] | None = None,
) -> None:
    out = con.writer
    i = refused = 0
    held = HeldBlockMemory(DataRoot(Path(settings.data_root)).held_block)
    left = held.recall()
    if left is not None:  # the first trial would open the gripper at HOME: ask first
        con.line(
            f"the last session ended with the BLOCK IN THE GRIPPER ({left.get('run_stem')}, "
            f"seen: {left.get('evidence')}); the next trial opens the gripper at HOME",
            style="bold red",
        )
        log.warning(
            "held_block_from_last_session",
            run_stem=str(left.get("run_stem")), evidence=str(left.get("evidence")),
            at=str(left.get("at", "")), path=str(held.path),
        )  # fmt: skip
        if resolve_held is None or not await resolve_held():
            report.stopped_by = (
                f"block held since the last session ({left.get('run_stem')}): take it out by "
                f"hand, then start with --confirm to say so (or delete {held.path})"
            )
            return
        held.forget()
        log.warning("block_held_resolved", run_stem=left.get("run_stem"), by="operator")
        print("the operator took the block out: the session goes on", file=out, flush=True)
    while settings.trials is None or i < settings.trials:
        if sigs.stop.is_set():
            report.stopped_by = "signal"
            break
        problem = await wait_for_storage(rig, settings, sigs.stop, out)
        if problem is not None:
            report.stopped_by = report.storage_problem = f"storage: {problem}"
            break
        if i > 0 and confirm is not None and not await confirm():
            report.stopped_by = "operator declined"
            break
        # the daemon first: a simulated rig that was lost has lost its scene server too
        if client is not None and not client.is_connected:
            log.warning("daemon_reconnect", reason="connection lost in the previous trial")
            print("reconnecting to the daemon (lost in the previous trial)", file=out, flush=True)
            try:
                await client.connect()
            except DaemonError as exc:
                print(f"daemon unavailable: {exc}; stopping", file=out, flush=True)
                report.stopped_by = f"daemon unavailable: {exc}"
                break
            if isinstance(rig.arm, DaemonArm):  # a restarted daemon may have another envelope
                had = rig.arm.envelope
                rig.arm.envelope = check_envelope(
                    settings,
                    client,
                    warn_missing=had is not None,
                    arcs=(rig.arc_pick, rig.arc_place),
                )
        try:
            seed = await between_trials(i) if between_trials is not None else None
        except SimControlError as exc:  # the session ends with its summary, not a traceback
            log.error("scene_not_prepared", reason=str(exc))
            print(f"no fresh scene: {exc}; stopping", file=out, flush=True)
            report.stopped_by = f"no fresh scene: {exc}"
            break
        views.reap()
        con.trial_start(i + 1)
        try:
            summary = await run_trial(
                rig,
                force=sigs.force,
                scene_seed=seed,
                on_stage=con.stage_end,
                on_stage_start=con.stage_start,
                on_trace=con.on_trace,
            )
        except DataRootError as exc:
            # the root failed between the check and the trial's first file: the arm has not
            # moved and nothing was written; wait for it like after any storage fault
            refused += 1
            log.error("trial_not_started", reason=str(exc), times=refused)
            print(f"trial not started: {exc}", file=out, flush=True)
            if refused >= 3:
                report.stopped_by = report.storage_problem = f"storage: {exc}"
                break
            continue
        refused = 0
        report.trials.append(summary)
        alive = getattr(rig, "arm_alive", lambda: True)()
        con.trial_end(
            summary, summary_line(summary, getattr(rig, "recorder", None)), arm_alive=alive
        )
        # the trial's records are written (none pending on a failed root): build its Rerun file
        if settings.viewing.rerun_after_trial and not summary.records_pending:
            # no recorder: no side video to wait for
            wait = (
                POST_TRIAL_VIDEO_WAIT_S
                if getattr(getattr(rig, "recorder", None), "enabled", False)
                else 0.0
            )
            views.build(summary.run_dir, summary.run_stem, wait)
        if summary.held:  # the next trial would open the gripper at HOME
            # ... so only an operator who took the block out lets the session go on
            if resolve_held is None or not await resolve_held():
                report.stopped_by = "block held in the gripper (take it out by hand)"
                held.remember(summary.run_stem, summary.held_evidence)  # the next session asks
                break
            log.warning("block_held_resolved", run_stem=summary.run_stem, by="operator")
            print("the operator took the block out: the session goes on", file=out, flush=True)
        if "ledger row" not in summary.records_pending:  # a pending row waits for the root
            check_ledger_row(
                DataRoot(Path(settings.data_root), settings.task).ledger, summary.run_stem
            )
        i += 1
        if sigs.force.is_set():
            report.stopped_by = "forced stop"
            break


#: how long the post-trial Rerun builder waits for the side video (the recorder finishes the
#: mp4 after the trial)
POST_TRIAL_VIDEO_WAIT_S = 30.0
