"""What `mecharm view` does once its arguments are checked: build one trial's recording,
or follow a data root (the part that imports rerun; cli.py is the part that need not).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import time
import urllib.parse
from pathlib import Path

import rerun as rr

from mecharm.common.layout import RECORDING, RUNS_DIR, DataRoot, RecordingFiles
from mecharm.common.rerun_viewer import no_viewer_message, viewer_executable
from mecharm.tools.view.cli import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, say
from mecharm.tools.view.follow import follow, stop_signals
from mecharm.tools.view.layout import default_blueprint
from mecharm.tools.view.rerunlog import log_trial
from mecharm.tools.view.sidevideo import SIDE_IMAGE_FPS
from mecharm.tools.view.trialfiles import ViewInputError, find_trace, read_trial

__all__ = ["APP_ID", "build", "run_follow", "spawn", "wait_for_recording"]

#: the Rerun application id: the viewer keeps one layout for all mechArm recordings
APP_ID = "mecharm"


#: how long the recording may take to reach a spawned viewer before the command gives up
#: (a viewer that died at start would otherwise be waited for without end)
VIEWER_FLUSH_S = 60.0


def serve_web(rec: rr.RecordingStream, web_port: int) -> str:
    """Serve ``rec`` to a browser: a gRPC server in this process that keeps the recording,
    and Rerun's web viewer on ``web_port`` pointed at it; the address to open."""
    uri = rr.serve_grpc(grpc_port=free_port(), default_blueprint=default_blueprint(), recording=rec)
    rr.serve_web_viewer(web_port=web_port, open_browser=False, connect_to=uri)
    return f"http://127.0.0.1:{web_port}/?url={urllib.parse.quote(uri, safe='')}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn(rec: rr.RecordingStream, viewer: str) -> None:
    """Start the viewer found beside this interpreter (``viewer.viewer_executable``: the venv
    need not be activated) and stream ``rec`` to it."""
    rr.spawn(executable_path=viewer, default_blueprint=default_blueprint(), recording=rec)


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


def build(
    target: Path,
    save: Path | None,
    wait_s: float = 0.0,
    web_port: int | None = None,
    side_frames: bool | None = None,
) -> tuple[int, str]:
    """Build the recording of one trial; (exit code, summary line). ``web_port``: serve it
    to a browser on that port (the address said at once) until SIGINT or SIGTERM."""
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
    viewer = None
    if save is None and web_port is None:
        viewer = viewer_executable()
        if viewer is None:
            return EXIT_FAILED, no_viewer_message()
    rec = rr.RecordingStream(APP_ID, recording_id=tf.stem)
    tmp = save.with_name(f".{save.name}.{os.getpid()}.tmp") if save is not None else None
    url = None
    # serving: SIGINT and SIGTERM end it from the start (a stop that came before the handler
    # would kill the process instead of ending it with its summary)
    signals = stop_signals() if web_port is not None else contextlib.nullcontext(lambda: False)
    try:
        stopped = signals.__enter__()
        if tmp is not None:
            rec.save(tmp, default_blueprint=default_blueprint())
        elif web_port is not None:
            url = serve_web(rec, web_port)
            say(f"serving {tf.stem} to a browser: open {url} (Ctrl-C stops)")
        else:
            assert viewer is not None
            spawn(rec, viewer)
        # the desktop viewer decodes the side video's H.264 only through an ffmpeg
        # executable: without one, it gets the frames as images (docs/viewing.md)
        if side_frames is None:
            side_frames = viewer is not None and shutil.which("ffmpeg") is None
            if side_frames and tf.video is not None:
                tf.notes.append(
                    "no ffmpeg on PATH: the side video is shown as JPEG frames "
                    f"({SIDE_IMAGE_FPS:g} a second; the viewer needs ffmpeg for the H.264 video)"
                )
        lg = log_trial(rec, tf, side_images=side_frames)
        rec.flush(timeout_sec=VIEWER_FLUSH_S)
        if url is not None:
            say(f"{tf.stem}: all of it served; open {url} (Ctrl-C stops)")
            while not stopped():
                time.sleep(0.2)
        rec.disconnect()
        if tmp is not None and save is not None:
            os.replace(tmp, save)
    except Exception as exc:  # writing the file or talking to the viewer failed
        what = "not served" if web_port is not None else "not built"
        hint = f" (is port {web_port} taken? --web-port PORT)" if web_port is not None else ""
        return EXIT_FAILED, f"{tf.trace}: recording {what}: {type(exc).__name__}: {exc}{hint}"
    finally:  # a failure or Ctrl-C leaves no half-written file behind
        signals.__exit__(None, None, None)
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
    c = lg.counts
    where = (
        f"wrote {save}"
        if save is not None
        else f"served at {url} until stopped"
        if url is not None
        else "sent to the viewer"
    )
    summary = (
        f"{where}: {c.get('measured', 0)} joint readings, {c.get('commanded', 0)} commands, "
        f"{c.get('images', 0)} images, {c.get('video_frames', 0)} video frames"
        + (f", {c['side_images']} side images" if c.get("side_images") else "")
        + " "
        f"({time.perf_counter() - t0:.2f} s, {time.process_time() - c0:.2f} s CPU)"
    )
    lines = [f"note: {n}" for n in tf.notes] + [summary]
    return EXIT_OK, "\n".join(lines)


def run_follow(root_path: Path, save: Path | None, connect: str | None) -> int:
    root = DataRoot(root_path)
    if not root.root.is_dir():
        say(f"{root.root}: no such data root (give the folder that holds {RUNS_DIR}/)")
        return EXIT_BAD_INPUT
    rec = rr.RecordingStream(APP_ID)
    try:
        sinks: list[rr.FileSink | rr.GrpcSink] = []
        if save is not None:
            sinks.append(rr.FileSink(str(save)))
        if connect is not None:
            sinks.append(rr.GrpcSink(connect))
        if sinks:
            rec.set_sinks(*sinks, default_blueprint=default_blueprint())
        else:
            viewer = viewer_executable()
            if viewer is None:
                say(no_viewer_message())
                return EXIT_FAILED
            spawn(rec, viewer)
    except Exception as exc:  # a URL rerun refuses, a viewer that does not start
        say(f"cannot reach the viewer: {type(exc).__name__}: {exc}")
        return EXIT_FAILED
    say(f"following trials under {root.runs} (every task's; Ctrl-C stops)")
    with stop_signals() as stopped:
        n = follow(rec, root, stopped, say)
    rec.flush()
    rec.disconnect()
    say(f"stopped; {n} trace lines streamed")
    return EXIT_OK
