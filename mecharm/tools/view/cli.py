"""`mecharm view RUN_DIR|TRACE [--save FILE.rrd | --web] [--wait S]` and `mecharm view --follow DATA_ROOT`.

Exit codes: 0 the recording was built (or follow mode was stopped by Ctrl-C/SIGTERM);
1 building failed (the .rrd could not be written, no viewer to open); 2 bad input (no
such path, the run log instead of the trace, not a trial folder, a corrupt trace line,
a bad viewer URL, rerun-sdk not installed), with a one-line message. Without ``--save``
the Rerun viewer is spawned; with ``--web``, or when there is no display to open it on,
the recording is served to a browser until Ctrl-C (docs/viewing.md). This module does not import rerun, so
an install without it gets that one line (build.py holds the part that needs it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mecharm.common.layout import RUN_FOLDER_PREFIX, RUNS_DIR, TASK_NAME_RE, DataRoot, run_number
from mecharm.common.logging import configure_logging
from mecharm.common.rerun_viewer import (
    NOT_INSTALLED,
    display_problem,
    rerun_available,
    viewer_url_problem,
)

__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILED", "EXIT_OK", "main", "register", "run", "say"]

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


#: the web viewer's port (Rerun's own default)
WEB_PORT = 9090


def _port(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 1-65535, got {v}")
    return v


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not v >= 0:  # also refuses NaN
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, got {text}")
    return v


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = "Build a Rerun recording of a trial (or follow trials live) and view it."
    parser.add_argument(
        "target", nargs="?", type=Path, metavar="RUN_DIR|TRACE", help="a run folder or its trace"
    )
    parser.add_argument("--save", type=Path, default=None, metavar="FILE.rrd",
                        help="write the recording to this file (its folder must exist) instead of opening the viewer")  # fmt: skip
    parser.add_argument("--wait", type=_seconds, default=0.0, metavar="S",
                        help="wait up to S s for the side recording to be finished before building")  # fmt: skip
    parser.add_argument("--follow", type=Path, default=None, metavar="DATA_ROOT",
                        help="stream the newest trial of this data root, and every later one, as it runs")  # fmt: skip
    parser.add_argument("--web", action="store_true",
                        help="serve the recording to a browser (Rerun's web viewer) until Ctrl-C; "
                        "what happens anyway when there is no display")  # fmt: skip
    parser.add_argument("--web-port", type=_port, default=WEB_PORT, metavar="PORT",
                        help=f"with --web: the web viewer's port (default {WEB_PORT})")  # fmt: skip
    parser.add_argument("--side-frames", action="store_true", default=None,
                        help="the side video as JPEG frames decoded here (10 a second), not the "
                        "H.264 asset the desktop viewer can decode only with ffmpeg; the "
                        "default when spawning a viewer with no ffmpeg on PATH")  # fmt: skip
    parser.add_argument("--connect", default=None, metavar="URL",
                        help="with --follow: a running viewer's gRPC URL (default: spawn a viewer)")  # fmt: skip
    parser.set_defaults(func=run)


def say(text: str) -> None:
    print(f"mecharm view: {text}", file=sys.stderr, flush=True)


def save_problem(save: Path) -> str | None:
    """Why the recording cannot be written to ``save`` (as `mecharm report --out` would
    fail: no folder is made for it), or None."""
    if save.is_dir():
        return f"cannot write {save}: it is a folder; give a file name, e.g. {save / 'trial.rrd'}"
    if not save.parent.is_dir():
        return f"cannot write {save}: no such folder {save.parent}"
    return None


def _task_folder(path: Path) -> bool:
    """A task's folder of run folders (``run_<task>``: docs/tasks.md)."""
    task = path.name.removeprefix(RUN_FOLDER_PREFIX)
    return path.name.startswith(RUN_FOLDER_PREFIX) and bool(TASK_NAME_RE.fullmatch(task))


def follow_root_problem(root: Path) -> str | None:
    """Why ``root`` is not a data root to follow, or None. A folder inside a data root (its
    runs folder, the run folders' folder, one trial's folder) is answered with the root to
    give, as `mecharm report` refuses them; a root without trials yet is followed."""
    if not root.is_dir():
        return f"{root}: no such data root (give the folder that holds {RUNS_DIR}/)"
    if DataRoot(root).runs.is_dir():
        return None
    up = None
    if root.name == RUNS_DIR:
        up = root.parent
    elif _task_folder(root) and root.parent.name == RUNS_DIR:
        up = root.parent.parent
    elif run_number(root.name) is not None and _task_folder(root.parent):
        up = root.parent.parent.parent
        return (
            f"{root} is one trial's folder: `mecharm view {root}` shows it; to follow the "
            f"trials, give the data root: --follow {up}"
        )
    if up is not None:
        return f"{root} is inside a data root; follow the data root itself: --follow {up}"
    return None


def run(args: argparse.Namespace) -> int:
    # stderr carries the one-line messages; only warnings (e.g. a mat grid not drawn) join them
    configure_logging("warning")
    if not rerun_available():
        say(NOT_INSTALLED)
        return EXIT_BAD_INPUT
    if args.save is not None and (problem := save_problem(args.save)) is not None:
        say(problem)
        return EXIT_FAILED
    if args.follow is not None:
        if args.target is not None:
            say("give either RUN_DIR|TRACE or --follow DATA_ROOT, not both")
            return EXIT_BAD_INPUT
        if args.connect is not None and (problem := viewer_url_problem(args.connect)):
            say(f"--connect {problem}")
            return EXIT_BAD_INPUT
        if (problem := follow_root_problem(args.follow)) is not None:
            say(problem)
            return EXIT_BAD_INPUT
        from mecharm.tools.view.build import run_follow

        return run_follow(args.follow, args.save, args.connect)
    if args.target is None:
        say("give a run folder or a trace (or --follow DATA_ROOT)")
        return EXIT_BAD_INPUT
    if args.connect is not None:
        say("--connect works with --follow only")
        return EXIT_BAD_INPUT
    web = args.web
    if args.save is not None and web:
        say("give either --save FILE.rrd or --web, not both")
        return EXIT_BAD_INPUT
    if args.save is None and not web and (problem := display_problem()) is not None:
        # the desktop viewer would die at once and leave this command waiting for it
        say(f"{problem}: serving the web viewer instead (--web; --save FILE.rrd writes a file)")
        web = True
    from mecharm.tools.view.build import build

    code, text = build(
        args.target, args.save, args.wait, args.web_port if web else None, args.side_frames
    )
    if code == EXIT_OK:
        print(text, flush=True)
    else:
        say(text)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mecharm view")
    register(parser)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:  # Ctrl-C while building: nothing half-written is left (tmp file)
        say("interrupted")
        return 130
