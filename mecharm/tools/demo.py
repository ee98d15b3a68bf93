"""`make run`: the full demo on the simulated rig.

Starts the simulated rig (arm daemon + workcell cameras) and the recorder as
background processes, runs 3 recorded trials through the real runtime service,
stops everything cleanly and prints a summary table and where the files are. The
session's console and log file are ``mecharm-runtime``'s (docs/console.md).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mecharm.common.config import load_settings
from mecharm.common.defaults import RUNTIME_CONFIG
from mecharm.common.layout import DataRoot, default_demo_root
from mecharm.common.logging import configure_logging
from mecharm.common.shutdown import capture_signals
from mecharm.runtime.cli import session_logging
from mecharm.runtime.config import TAG_RE, RuntimeSettings
from mecharm.runtime.console import RuntimeConsole
from mecharm.runtime.service import ServiceReport, run_service, session_console
from mecharm.runtime.simcontrol import scene_next
from mecharm.sim.profile import ProfileError, SimProfile, load_profile
from mecharm.tools.report.cli import run as write_report
from mecharm.tools.simrig import Child, start_recorder, start_sim_daemon

__all__ = ["DemoRig", "main", "run_session", "start_demo_rig", "summary_table"]


def summary_table(report: ServiceReport) -> str:
    head = f"{'trial':<28} {'result':<10} {'verdicts':<20} {'duration':>9} {'frames':>7} {'fps':>6}  recording"
    lines = [head, "-" * len(head)]
    for t in report.trials:
        r = t.recording
        lines.append(
            f"{t.run_stem:<28} {t.status:<10} {t.verdicts or '-':<20} "
            f"{t.duration_s:>8.1f}s {r.frames if r.frames is not None else '-':>7} "
            f"{f'{r.fps:.1f}' if r.fps else '-':>6}  {r.status}"
        )
        if t.reason:
            lines.append(f"{'':<28} reason: {t.reason}")
    return "\n".join(lines)


@dataclass
class DemoRig:
    """The demo's simulated rig and recorder (background processes) and the runtime settings
    that point a session at them."""

    #: in start order; ``stop()`` stops them in reverse
    children: list[Child]
    settings: RuntimeSettings
    #: the workcell's control URL (``POST /scene/next``, ``GET /scene/truth``)
    control_url: str
    #: where the children's and the session's log files go (the data root's logs folder)
    logs: Path

    def stop(self) -> None:
        for c in reversed(self.children):
            c.stop()


def start_demo_rig(
    root: Path,
    *,
    trials: int | None,
    seed: int,
    time_scale: float,
    sim_profile: str,
    profile: SimProfile,
    recorder: bool = True,
    say: Callable[[str], None] | None = None,
    extra: Mapping[str, Any] | None = None,
    python: str | None = None,
) -> DemoRig:
    """The demo's set-up, one home for it (``make run`` and ``mecharm_dev.successcheck``):
    the simulated rig (daemon + workcell cameras) with ``--sim-profile sim_profile`` and the
    first scene of ``seed``, the recorder on its side camera (unless ``recorder`` is False),
    and the RuntimeSettings of a session against them. ``root`` must exist. ``say``: the
    progress lines (default: print). ``extra``: settings of the caller's on top (dotted
    paths; ``mecharm eval``'s task and policy). ``python``: the interpreter of the rig's and
    the recorder's processes (default this one). A failure stops whatever was already
    started."""
    tell = say or (lambda text: print(text, flush=True))
    logs = DataRoot(root).logs
    children: list[Child] = []
    try:
        tell(
            f"starting the simulated rig (profile {sim_profile}, seed {seed}, "
            f"time scale {time_scale}x) ..."
        )
        rig = start_sim_daemon(
            logs,
            seed=seed,
            time_scale=time_scale,
            extra_args=["--sim-profile", sim_profile],
            python=python,
        )
        children.append(rig.daemon)
        udp = None
        if recorder:
            tell("starting the recorder (side camera) ...")
            rec, udp = start_recorder(logs, root, rig.side_url, python=python)
            children.append(rec)
        # The runtime settings of every demo session, in this one dict: a key added here
        # reaches `make run` and the success check alike (docs/success.md).
        overrides: dict[str, Any] = {
            "data_root": root,
            "daemon.port": rig.daemon_port,
            "perception.top_camera": rig.top_url,
            "recorder.port": udp,
            "recorder.enabled": recorder,
            # no time_scale: the runtime takes the daemon's from its hello (docs/setup.md)
            "trials": trials,
            "sim_control_url": rig.control_url,
            # what the operator's checkerboard calibration of this camera would give
            # (docs/simulation-optics.md); None for the ideal pinhole
            "perception.top_camera_calibration": profile.top_camera_calibration(),
        }
        settings = load_settings(RuntimeSettings, RUNTIME_CONFIG, {**overrides, **(extra or {})})
    except BaseException:
        for c in reversed(children):
            c.stop()
        raise
    return DemoRig(children, settings, rig.control_url, logs)


async def run_session(
    settings: RuntimeSettings,
    between: Callable[[int], Awaitable[int | None]],
    console: RuntimeConsole,
) -> ServiceReport:
    """One session of ``settings.trials`` trials through the runtime's service, as
    ``mecharm-runtime`` runs it: Ctrl-C/SIGTERM as there, ``between(i)`` before trial ``i``."""
    with capture_signals() as sigs:
        return await run_service(settings, signals=sigs, between_trials=between, console=console)


async def run_scenes(
    settings: RuntimeSettings,
    control_url: str,
    seed: int,
    console: RuntimeConsole,
    per_scene: int = 1,
    scene_end: Callable[[int], None] | None = None,
) -> ServiceReport:
    """A session on the simulated rig whose trial ``i`` runs on scene ``seed + i //
    per_scene`` (the first scene is the one the rig started with; each further one is
    asked of the workcell, also to set a scene again for a repeat). ``scene_end(i)``: told
    before trial ``i``'s scene replaces trial ``i - 1``'s (the world as that trial left it)."""

    async def between(i: int) -> int | None:
        if i == 0:
            return seed
        if scene_end is not None:
            await asyncio.to_thread(scene_end, i - 1)
        info = await asyncio.to_thread(scene_next, control_url, seed + i // per_scene)
        return seed + i // per_scene if info else None

    return await run_session(settings, between, console)


def _tag(text: str) -> str:
    """A ``--tag`` word, checked by the runtime's own rule (before anything is started)."""
    if not TAG_RE.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r}: 1-32 characters of letters, digits, '.', '_' or '-'"
        )
    return text


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m mecharm.tools.demo", description=__doc__.splitlines()[0]
    )
    p.add_argument("--trials", type=int, default=3)
    p.add_argument(
        "--seed", type=int, default=7, help="scene seed of the first trial (then +1 per trial)"
    )
    p.add_argument(
        "--time-scale",
        type=float,
        default=5.0,
        help="sim arm speed-up (sleeps/timeouts scaled alike)",
    )
    p.add_argument(
        "--data-root",
        type=Path,
        default=default_demo_root(),
        help="created if missing (default %(default)s; make run: the checkout's data/demo)",
    )
    p.add_argument(
        "--sim-profile",
        default="rig",
        help="how the simulated world disagrees with the runtime: rig (default), ideal, harsh "
        "or a profile YAML (docs/simulation.md)",
    )
    p.add_argument(
        "--no-recorder",
        action="store_true",
        help="run without the recorder (recording_status none)",
    )
    p.add_argument(
        "--tag",
        action="append",
        type=_tag,
        metavar="TAG",
        help="a label for these trials, in every run log; the report filters by it (repeatable)",
    )
    args = p.parse_args(argv)
    try:
        profile = load_profile(args.sim_profile)
    except ProfileError as exc:
        p.error(str(exc))
    configure_logging("warning")  # until the session's log file takes over
    root = args.data_root.resolve()
    root.mkdir(
        parents=True, exist_ok=True
    )  # the demo owns its data root (the runtime never creates one)
    logs = DataRoot(root).logs
    rig: DemoRig | None = None
    t0 = time.monotonic()
    try:
        rig = start_demo_rig(
            root,
            trials=args.trials,
            seed=args.seed,
            time_scale=args.time_scale,
            sim_profile=args.sim_profile,
            profile=profile,
            recorder=not args.no_recorder,
            extra={"tags": args.tag} if args.tag else None,
        )
        settings = rig.settings
        print(
            f"running {args.trials} trials (the FK table is built on the first run, ~10 s) ...",
            flush=True,
        )
        console = session_console(settings)
        try:
            # the runtime's log file under logs/ and its console: each thing said once
            with session_logging(settings, console):
                report = asyncio.run(run_scenes(settings, rig.control_url, args.seed, console))
        finally:
            console.close()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        print(f"demo failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        if rig is not None:
            rig.stop()
    print()
    print(summary_table(report))
    ok = sum(t.succeeded for t in report.trials)
    print(
        f"\n{ok}/{len(report.trials)} trials placed the block in the box; demo took {time.monotonic() - t0:.0f}s"
    )
    print(f"run folders: {DataRoot(root).run_folders}")
    print(f"ledger:      {DataRoot(root).ledger}")
    print(f"logs:        {logs}")
    if report.trials:  # the whole root on one page; a trial in the viewer (docs/report.md)
        write_report(root)
        print(f"a trial:     mecharm view {DataRoot(root).run_dir(report.trials[-1].run_stem)}")
    # a trial that ends `stopped` is a result the table shows, not a broken demo
    return 0 if report.trials else 1


if __name__ == "__main__":
    raise SystemExit(main())
