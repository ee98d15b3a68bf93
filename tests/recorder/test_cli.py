"""The recorder as a real process: SIGKILL mid-trial, SIGTERM, bad flags, port in use."""

from __future__ import annotations

import csv
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import av
import pytest

from mecharm.common.layout import FRAME_LOG, META, VIDEO, DataRoot
from mecharm.recorder.events import RecordingMeta, TrialStart
from mecharm.recorder.repair import cut_partial_header
from mecharm.recorder.sender import RecorderSender

STEM = "run_0007_20260101_120000"
CAMERA = "synthetic?fps=30&w=640&h=360"


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(
    tmp_path: Path, port: int, *extra: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """The recorder as a program starts it (stdin not a terminal)."""
    (tmp_path / "data").mkdir(exist_ok=True)
    with open(tmp_path / "recorder.log", "wb") as log:  # the child keeps its own copy of the fd
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mecharm.recorder",
                "--data-root",
                "data",
                "--udp-port",
                str(port),
                "--camera",
                CAMERA,
                "--status-interval",
                "0",
                *extra,
            ],
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            env=env,
        )


def _wait_ready(sender: RecorderSender, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, "recorder exited during start-up"
        if sender.request_frame("ready_probe", timeout=0.5)[2] == "ok_orphan":
            return
    raise AssertionError("recorder did not become ready")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


@pytest.mark.slow
def test_sigkill_mid_trial_leaves_a_decodable_mp4(tmp_path):
    port = _free_udp_port()
    proc = _start(tmp_path, port)
    try:
        s = RecorderSender(port=port)
        _wait_ready(s, proc)
        s.notify(TrialStart(run_stem=STEM))
        time.sleep(3.5)
        # the recorder's own newest capture just before the kill: measuring the loss from
        # it, not from the wall clock, leaves out how far a loaded machine held the camera back
        _path, newest, reason = s.request_frame("before_kill", timeout=30)
        assert reason == "ok" and newest is not None
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        _stop(proc)
    d = DataRoot(tmp_path / "data").recording(STEM).dir
    assert not (d / META).exists()  # no meta = ended abnormally
    with open(d / FRAME_LOG, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows, f"{FRAME_LOG} must hold the rows flushed before the kill"
    anchor = float(rows[0]["capture_ts"])
    # each row is flushed with its frame; frames still queued for the encoder (at most
    # max_pending_frames = 2 s of them on a loaded machine) are lost with the process
    assert newest - float(rows[-1]["capture_ts"]) <= 2.0
    cut_partial_header(
        d / VIDEO
    )  # what the repair does first (docs/recorder.md, "Crashed recordings")
    decoded = []
    with av.open(str(d / VIDEO)) as c:
        try:
            for frame in c.decode(video=0):
                decoded.append(float(frame.pts * frame.time_base))
        except av.error.InvalidDataError:
            pass  # a fragment cut by the kill; everything before it must decode
    assert len(decoded) >= 2 * 30
    # every frame of a closed fragment is there: at most the open one (fragment_sec = 0.25 s,
    # 8 frames at 30 fps, plus the frame being muxed) of the rows frame_log.csv lists is missing
    assert len(rows) - 10 <= len(decoded) <= len(rows)
    last_wall = anchor + decoded[-1]
    lost = float(rows[-1]["capture_ts"]) - last_wall  # of the video encoded: the promise
    assert lost <= 1.0, f"lost {lost:.2f} s of encoded video"


@pytest.mark.slow
def test_sigterm_closes_the_trial_truncated(tmp_path):
    port = _free_udp_port()
    proc = _start(tmp_path, port)
    try:
        s = RecorderSender(port=port)
        _wait_ready(s, proc)
        s.notify(TrialStart(run_stem=STEM))
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        _stop(proc)
    d = DataRoot(tmp_path / "data").recording(STEM).dir
    meta = RecordingMeta.model_validate_json((d / META).read_text())
    assert meta.status == "truncated" and meta.status_reason == "shutdown"
    assert meta.frames_written == meta.frames_captured > 10
    log = (tmp_path / "recorder.log").read_text()
    assert "shutdown_requested" in log and "trial_closed" in log


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--udp-port", "99999"], "udp_port"),
        (["--camera", " "], "camera"),
        (["--log-level", "loud"], "invalid choice"),
        # no camera given: refused, never a test card in its place
        ([], "no side camera given: pass --camera SOURCE"),
    ],
)
def test_bad_flags_exit_2_naming_the_problem(tmp_path, args, message):
    r = subprocess.run(
        [sys.executable, "-m", "mecharm.recorder", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and message in r.stderr


@pytest.mark.slow
def test_port_in_use_exits_with_a_reason(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as busy:
        busy.bind(("127.0.0.1", 0))
        port = busy.getsockname()[1]
        proc = _start(tmp_path, port)
        try:
            assert proc.wait(30) == 2
        finally:
            _stop(proc)
    assert "recorder_start_failed" in (tmp_path / "recorder.log").read_text()


@pytest.mark.skipif(not hasattr(os, "getsid"), reason="POSIX sessions")
@pytest.mark.parametrize("own", [True, False])
def test_started_by_a_program_it_takes_a_session_of_its_own(tmp_path, own):
    """Its own session is its own autogroup: busy processes of the starter's session do not
    queue in front of a frame_request (docs/recorder.md, "Under CPU contention")."""
    port = _free_udp_port()
    env = {**os.environ, "MECHARM_RECORDER_OWN_SESSION": "true" if own else "false"}
    proc = _start(tmp_path, port, env=env)
    try:
        s = RecorderSender(port=port)
        _wait_ready(s, proc)
        sid = os.getsid(proc.pid)
        nices = set()
        for task in Path(f"/proc/{proc.pid}/task").glob("*"):  # the writer thread's nice value
            nices.add(int((task / "stat").read_text().rsplit(")", 1)[1].split()[16]))
        s.close()
    finally:
        _stop(proc)
    if own:
        assert sid == proc.pid, "the recorder should lead a session of its own"
        assert '"session": "new"' in (tmp_path / "recorder.log").read_text()
        if sys.platform.startswith("linux"):  # the encoder yields to the reply, in its group
            assert nices == {0, 10}, nices
    else:
        assert sid == os.getsid(0), "own_session false: the starter's session"
        if sys.platform.startswith("linux"):  # beside the starter's busy processes: not niced
            assert nices == {0}, nices
