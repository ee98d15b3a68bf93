"""The long-running runtime: set up the rig once, then run trials one after another.

Life cycle (uvicorn-style): ``open_rig`` (FK table, arcs, top camera, daemon,
recorder link) → trials → close. Signals: the first Ctrl-C lets the current trial
finish and then stops; the second stops the arm at once (the trial aborts through
its exit path with ``stop`` instead of a retreat). A daemon lost during a trial
aborts that trial; the service reconnects only *between* trials, and says so.
"""

from __future__ import annotations

import contextlib
import sys
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from mecharm_cameras import CameraError, open_camera
from mecharm_common.fsutil import check_data_root
from mecharm_common.logging import get_logger
from mecharm_common.shutdown import ShutdownSignals
from mecharm_runtime.arm import DaemonArm, DryRunArm
from mecharm_runtime.client import DaemonClient, DaemonError
from mecharm_runtime.config import RuntimeSettings
from mecharm_runtime.eyes import CameraEyes, DryRunEyes
from mecharm_runtime.lookup import ensure_table, load_arc, load_table
from mecharm_runtime.perception import make_judge
from mecharm_runtime.ports import RealClock
from mecharm_runtime.recorder_link import RecorderLink
from mecharm_runtime.threads import to_thread
from mecharm_runtime.trial import DataRootError, Rig, TrialSummary, run_trial
from recorder.sender import RecorderSender

__all__ = ["ServiceReport", "open_rig", "run_service", "scene_next", "summary_line"]

log = get_logger("mecharm_runtime.service")


@asynccontextmanager
async def open_rig(settings: RuntimeSettings) -> AsyncIterator[tuple[Rig, DaemonClient | None]]:
    """Everything a session needs; released in reverse order, also when set-up fails half-way."""
    s = settings
    clock = RealClock()
    table_path = await to_thread(ensure_table, s.fk_dir)
    # the lookups keep to the guard's j1 limit, so they never choose a pose it would refuse
    table = await to_thread(load_table, table_path, j1_max=s.j1_max)
    # build the lookup index and the default bands' views now, not in the first trial's stages
    await to_thread(table.warm, [s.pick_band, s.place_band])
    arc_pick, arc_place = load_arc(s.approach_pick_arc), load_arc(s.approach_place_arc)
    try:
        camera = await to_thread(open_camera, s.top_camera)
    except CameraError as exc:
        raise RuntimeError(f"top camera {s.top_camera!r} cannot be opened: {exc}") from None
    client: DaemonClient | None = None
    sender: RecorderSender | None = None
    try:
        judge = (
            make_judge(s.judge, timeout=s.human_judge_timeout_s)
            if s.judge == "human"
            else make_judge(s.judge)
        )
        cam_eyes = CameraEyes(
            camera,
            judge,
            homography_frames=s.homography_frames,
            detect_repeat=s.detect_repeat,
            box_fallback_xz=s.box_xz_fallback,
            box_score_thresh=s.box_score_thresh,
        )
        if s.dry_run:
            arm: Any = DryRunArm(clock, s.home, s.j1_max)
            eyes: Any = DryRunEyes(arm, cam_eyes)
            alive: Callable[[], bool] = lambda: True  # noqa: E731
        else:
            token = (
                s.daemon_token_file.read_text(encoding="utf-8").strip()
                if s.daemon_token_file
                else None
            )
            client = DaemonClient(
                s.daemon_host,
                s.daemon_port,
                token=token,
                request_timeout=s.request_timeout_s,
                connect_timeout=s.connect_timeout_s,
                busy_wait_s=s.daemon_busy_wait_s,
                keepalive_s=s.daemon_keepalive_s or None,
            )
            await client.connect()
            arm, eyes = DaemonArm(client, clock, s.j1_max), cam_eyes
            c = client
            alive = lambda: c.is_connected  # noqa: E731
        if s.recorder_enabled and not s.dry_run:
            sender = RecorderSender(s.recorder_host, s.recorder_port)
        rig = Rig(
            s,
            arm,
            eyes,
            RecorderLink(sender, s.frame_timeout_s),
            clock,
            table,
            arc_pick,
            arc_place,
            arm_alive=alive,
            dry_run=s.dry_run,
        )
        # pings keep the daemon's slot between requests (docs/daemon.md, "Client slot")
        async with client.keepalive() if client is not None else contextlib.nullcontext():
            yield rig, client
    finally:
        if sender is not None:
            sender.close()
        if client is not None:
            await client.aclose()
        await to_thread(camera.close)


def scene_next(url: str, seed: int | None = None, timeout: float = 5.0) -> dict[str, Any]:
    """Simulated rig only: ask the workcell for a fresh scene (``POST {url}/scene/next``)."""
    import json

    target = url.rstrip("/") + "/scene/next" + (f"?seed={seed}" if seed is not None else "")
    req = urllib.request.Request(target, data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        body = resp.read()
    try:
        out = json.loads(body) if body else {}
    except ValueError:
        out = {"raw": body[:200].decode("utf-8", "replace")}
    return out if isinstance(out, dict) else {"result": out}


def summary_line(t: TrialSummary) -> str:
    rec = t.recording
    rec_txt = f"rec {rec.status}" + (
        f" {rec.frames} frames {rec.fps:.1f} fps" if rec.frames and rec.fps else ""
    )
    verdicts = f"pick {t.pick_verdict or '-'} place {t.place_verdict or '-'}"
    why = f" ({t.reason})" if t.reason else ""
    return f"{t.run_stem}: {t.status}{why}; {verdicts}; {t.duration_s:.1f}s; {t.moves} moves; {rec_txt}"


@dataclass
class ServiceReport:
    trials: list[TrialSummary] = field(default_factory=list)
    stopped_by: str = ""


async def run_service(
    settings: RuntimeSettings,
    *,
    signals: ShutdownSignals | None = None,
    out: TextIO | None = None,
    confirm: Callable[[], Awaitable[bool]] | None = None,
    between_trials: Callable[[int], Awaitable[int | None]] | None = None,
) -> ServiceReport:
    """Run ``settings.trials`` trials (or until stopped). ``between_trials(i)`` may prepare the
    next scene and return its seed; ``confirm()`` is asked before every trial but the first."""
    out = out or sys.stdout
    sigs = signals or ShutdownSignals()
    report = ServiceReport()
    problem = check_data_root(Path(settings.data_root), require_mount=settings.require_mount)
    if problem is not None:  # before any set-up: never write anywhere else
        raise DataRootError(problem)

    def status(stage: str, outcome: str, reason: str) -> None:
        print(f"  {stage:<22} {outcome}{'  ' + reason if reason else ''}", file=out, flush=True)

    async with open_rig(settings) as (rig, client):
        i = 0
        while settings.trials is None or i < settings.trials:
            if sigs.stop.is_set():
                report.stopped_by = "signal"
                break
            if i > 0 and confirm is not None and not await confirm():
                report.stopped_by = "operator declined"
                break
            seed = await between_trials(i) if between_trials is not None else None
            if client is not None and not client.is_connected:
                log.warning("daemon_reconnect", reason="connection lost in the previous trial")
                print(
                    "reconnecting to the daemon (lost in the previous trial)", file=out, flush=True
                )
                try:
                    await client.connect()
                except DaemonError as exc:
                    print(f"daemon unavailable: {exc}; stopping", file=out, flush=True)
                    report.stopped_by = f"daemon unavailable: {exc}"
                    break
            print(
                f"trial {i + 1}" + (f"/{settings.trials}" if settings.trials else "") + ":",
                file=out,
                flush=True,
            )
            summary = await run_trial(rig, force=sigs.force, scene_seed=seed, on_stage=status)
            report.trials.append(summary)
            print(summary_line(summary), file=out, flush=True)
            i += 1
            if sigs.force.is_set():
                report.stopped_by = "forced stop"
                break
    return report


async def ask_yes(prompt: str = "next trial? [Y/n] ") -> bool:
    """Terminal confirmation between trials (EOF or 'n' = stop)."""
    answer = await to_thread(_input, prompt)
    return answer is not None and answer.strip().lower() in ("", "y", "yes")


def _input(prompt: str) -> str | None:
    with contextlib.suppress(EOFError):
        return input(prompt)
    return None
