"""`mecharm view RUN_DIR|TRACE [--save FILE.rrd] [--wait S]` and `mecharm view --follow DATA_ROOT`.

Exit codes: 0 the recording was built (or follow mode was stopped by Ctrl-C/SIGTERM);
1 building failed (e.g. the .rrd could not be written); 2 bad input (no such path, the
run log instead of the trace, not a trial folder, a corrupt trace line), with a
one-line message. Without ``--save`` the Rerun viewer is spawned (docs/viewing.md).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

import rerun as rr

from mecharm_common.layout import RECORDING, RUNS_DIR, DataRoot, RecordingFiles
from mecharm_common.logging import configure_logging
from mecharm_tools.view.follow import follow, stop_signals
from mecharm_tools.view.layout import default_blueprint
from mecharm_tools.view.rerunlog import log_trial
from mecharm_tools.view.trialfiles import ViewInputError, find_trace, read_trial

__all__ = ["APP_ID", "EXIT_BAD_INPUT", "EXIT_FAILED", "EXIT_OK", "build", "register", "run"]

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
#: the Rerun application id: the viewer keeps one layout for all mechArm recordings
APP_ID = "mecharm"


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = "Build a Rerun recording of a trial (or follow trials live) and view it."
    parser.add_argument(
        "target", nargs="?", type=Path, metavar="RUN_DIR|TRACE", help="a run folder or its trace"
    )
    parser.add_argument("--save", type=Path, default=None, metavar="FILE.rrd",
                        help="write the recording to this file instead of opening the viewer")  # fmt: skip
    parser.add_argument("--wait", type=float, default=0.0, metavar="S",
                        help="wait up to S s for the side recording to be finished before building")  # fmt: skip
    parser.add_argument("--follow", type=Path, default=None, metavar="DATA_ROOT",
                        help="stream the newest trial of this data root, and every later one, as it runs")  # fmt: skip
    parser.add_argument("--connect", default=None, metavar="URL",
                        help="with --follow: a running viewer's gRPC URL (default: spawn a viewer)")  # fmt: skip
    parser.set_defaults(func=run)


def _say(text: str) -> None:
    print(f"mecharm view: {text}", file=sys.stderr, flush=True)


def wait_for_recording(trace: Path, wait_s: float) -> str | None:
    """Wait up to ``wait_s`` for the recorder's meta (it finishes the mp4 after the trial);
    a note when it did not come."""
    rec = RecordingFiles(trace.parent / RECORDING)
    if wait_s <= 0 or not rec.dir.is_dir():
        return None
    deadline = time.monotonic() + wait_s
    while not rec.meta.is_file():
        if time.monotonic() >= deadline:
            return f"waited {wait_s:g} s for {rec.meta.name}; built without the side video"
        time.sleep(0.1)
    return None


def build(target: Path, save: Path | None, wait_s: float = 0.0) -> tuple[int, str]:
    """Build the recording of one trial; (exit code, summary line)."""
    try:
        trace = find_trace(target)
        waited = wait_for_recording(trace, wait_s)
        t0, c0 = time.perf_counter(), time.process_time()
        tf = read_trial(trace)
    except ViewInputError as exc:
        return EXIT_BAD_INPUT, str(exc)
    if waited:
        tf.notes.append(waited)
        tf.video = None
    rec = rr.RecordingStream(APP_ID, recording_id=tf.stem)
    tmp = save.with_name(f".{save.name}.{os.getpid()}.tmp") if save is not None else None
    try:
        if tmp is not None:
            tmp.parent.mkdir(parents=True, exist_ok=True)
            rec.save(tmp, default_blueprint=default_blueprint())
        else:
            rec.spawn(default_blueprint=default_blueprint())
        lg = log_trial(rec, tf)
        rec.flush()
        rec.disconnect()
        if tmp is not None and save is not None:
            os.replace(tmp, save)
    except Exception as exc:  # writing the file or talking to the viewer failed
        return EXIT_FAILED, f"{tf.trace}: recording not built: {type(exc).__name__}: {exc}"
    finally:  # a failure or Ctrl-C leaves no half-written file behind
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
    c = lg.counts
    where = f"wrote {save}" if save is not None else "sent to the viewer"
    summary = (
        f"{where}: {c.get('measured', 0)} joint readings, {c.get('commanded', 0)} commands, "
        f"{c.get('images', 0)} images, {c.get('video_frames', 0)} video frames "
        f"({time.perf_counter() - t0:.2f} s, {time.process_time() - c0:.2f} s CPU)"
    )
    lines = [f"note: {n}" for n in tf.notes] + [summary]
    return EXIT_OK, "\n".join(lines)


def run_follow(root_path: Path, save: Path | None, connect: str | None) -> int:
    root = DataRoot(root_path)
    if not root.root.is_dir():
        _say(f"{root.root}: no such data root (give the folder that holds {RUNS_DIR}/)")
        return EXIT_BAD_INPUT
    rec = rr.RecordingStream(APP_ID)
    sinks: list[rr.FileSink | rr.GrpcSink] = []
    if save is not None:
        save.parent.mkdir(parents=True, exist_ok=True)
        sinks.append(rr.FileSink(str(save)))
    if connect is not None:
        sinks.append(rr.GrpcSink(connect))
    try:
        if sinks:
            rec.set_sinks(*sinks, default_blueprint=default_blueprint())
        else:
            rec.spawn(default_blueprint=default_blueprint())
    except Exception as exc:
        _say(f"cannot reach the viewer: {type(exc).__name__}: {exc}")
        return EXIT_FAILED
    _say(f"following trials under {root.run_folders} (Ctrl-C stops)")
    with stop_signals() as stopped:
        n = follow(rec, root, stopped, _say)
    rec.flush()
    rec.disconnect()
    _say(f"stopped; {n} trace lines streamed")
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    # stderr carries the one-line messages; only warnings (e.g. a mat grid not drawn) join them
    configure_logging("warning")
    if args.follow is not None:
        if args.target is not None:
            _say("give either RUN_DIR|TRACE or --follow DATA_ROOT, not both")
            return EXIT_BAD_INPUT
        return run_follow(args.follow, args.save, args.connect)
    if args.target is None:
        _say("give a run folder or a trace (or --follow DATA_ROOT)")
        return EXIT_BAD_INPUT
    if args.connect is not None:
        _say("--connect works with --follow only")
        return EXIT_BAD_INPUT
    code, text = build(args.target, args.save, args.wait)
    if code == EXIT_OK:
        print(text, flush=True)
    else:
        _say(text)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mecharm view")
    register(parser)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:  # Ctrl-C while building: nothing half-written is left (tmp file)
        _say("interrupted")
        return 130
