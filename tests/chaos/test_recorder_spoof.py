"""Spoofed datagrams against a real recorder process during a real recording, and the key file.

The scenario (``bench/bench_recorder_spoof.py``, also measured there): a legitimate
sender records a trial while a hostile local process without the key fires 10,000
datagrams at the recorder: spoofed trial_start/trial_end/frame_request/state events
as plain JSON, the same signed with a wrong key under the real session id, captured
datagrams altered, replays of this trial's and an older session's datagrams,
garbage. The real recording must come out whole, and nothing of the attacker's
may reach the data root (docs/recorder.md, "Authenticated events").
"""

from __future__ import annotations

import csv
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import av
import pytest

from bench.bench_recorder_spoof import (
    LEGIT_ANGLES,
    LEGIT_STAGES,
    attacker_folders,
    run_spoof_scenario,
)
from mecharm.common.layout import DataRoot
from mecharm.tools.simrig import free_port, start_recorder

HOSTILE = 10_000
FPS = 30


def test_spoofed_flood_during_a_real_recording_changes_nothing(tmp_path: Path) -> None:
    run = run_spoof_scenario(
        tmp_path, hostile=HOSTILE, trial_s=5.0, camera=f"synthetic?fps={FPS}&w=320&h=240"
    )
    meta = run.meta
    assert meta is not None and run.stopped, "the recorder wrote its meta and its last status"
    assert run.hostile_sent == HOSTILE
    assert {
        "plain_json",
        "wrong_key",
        "altered",
        "replay_live",
        "replay_old",
        "garbage",
        "oversized",
    } <= set(run.hostile_kinds)

    # the real recording: ok, closed by the real trial_end (not a spoofed one), every frame kept
    assert meta.status == "ok", meta.status_reason
    assert meta.ended_ts >= run.t_end_sent
    assert meta.started_ts >= run.t_start_sent
    rec = DataRoot(run.root).recording(run.stem)
    with open(rec.frame_log, newline="") as fh:
        frames = list(csv.DictReader(fh))
    assert meta.frames_written == meta.frames_captured == len(frames) > 0
    assert meta.frames_dropped == 0
    # as the recorder's own tests check: the camera's pace, never faster (a loaded machine is slower)
    assert 0 < meta.effective_fps <= FPS * 1.1
    # the frames span the trial from its real start to its real end: not cut by a spoofed end
    first, last = float(frames[0]["capture_ts"]), float(frames[-1]["capture_ts"])
    assert first >= run.t_start_sent and last <= meta.ended_ts
    assert meta.last_capture_ts == last
    with av.open(str(rec.video)) as c:
        assert sum(1 for _ in c.decode(video=0)) == len(frames)

    # every row is the legitimate sender's, and all of them are there
    with open(rec.states, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == meta.states_rows == run.legit_events
    assert [r["event_type"] for r in rows][:: len(rows) - 1] == ["trial_start", "trial_end"]
    assert {r["stage"] for r in rows if r["event_type"] == "stage"} <= set(LEGIT_STAGES)
    for r in rows:
        if r["event_type"] in ("measured", "commanded"):
            assert [float(r[f"j{i}"]) for i in range(6)] == LEGIT_ANGLES
    assert set(run.legit_frame_reasons) == {"ok"}
    assert meta.frame_requests == len(run.legit_frame_reasons) == len(list(rec.snapshots.iterdir()))

    # nothing of the attacker's: no folder, no orphan frame, no reply
    assert attacker_folders(run) == []
    orphans = DataRoot(run.root).orphan_frames
    # (the readiness probe's frame, if the camera had one yet; no folder when it had none)
    kept = list(orphans.iterdir()) if orphans.is_dir() else []
    assert all(p.name.startswith("ready_probe_") for p in kept)
    assert run.attacker_replies == 0
    assert DataRoot(run.root).recording(run.old_stem).meta.is_file()

    # every hostile datagram dropped and counted by reason: in the recorder's last status line,
    # and those that arrived during the trial in its meta
    refused = run.stopped["refused"]
    assert sum(refused.values()) == HOSTILE, refused
    assert set(refused) <= {"unsigned", "bad_mac", "replayed", "oversized"}
    assert all(refused.get(k, 0) > 0 for k in ("unsigned", "bad_mac", "replayed", "oversized"))
    assert 0 < sum(meta.events_refused.values()) <= HOSTILE
    assert run.stopped["rejected"] == 0  # nothing unsigned ever reached the JSON parser
    log = run.log.read_text() if run.log else ""
    assert log.count('"event_refused"') <= 10 * 60, "the refusal log line is rate limited"


def _recorder(tmp_path: Path, key: Path) -> subprocess.CompletedProcess[str]:
    (tmp_path / "data").mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "mecharm.recorder", "--data-root", str(tmp_path / "data"),
         "--udp-port", str(free_port(socket.SOCK_DGRAM)), "--key-file", str(key),
         "--camera", "synthetic"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_the_recorder_creates_the_key_file_0600_and_the_runtime_reads_it(tmp_path: Path) -> None:
    from mecharm.recorder.sender import RecorderSender

    key = tmp_path / "cfg" / "mecharm" / "recorder.key"
    rec, port = start_recorder(
        tmp_path / "logs", _data(tmp_path), "synthetic?fps=10&w=160&h=120", key_file=key
    )
    try:
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
        assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
        assert key.stat().st_uid == os.getuid()
        with RecorderSender(port=port, key_file=key) as s:
            # the recorder answers before its camera's first frame: ask until one is there
            reasons = []
            for _ in range(40):
                reasons.append(s.request_frame("with_the_key", timeout=10)[2])
                if reasons[-1] != "no_frame_available":
                    break
                time.sleep(0.25)
            assert reasons[-1] == "ok_orphan", reasons
        other = tmp_path / "other.key"
        with RecorderSender(port=port, key_file=other) as s:  # another key: never answered
            assert s.request_frame("without", timeout=0.5)[2] == "timeout"
    finally:
        rec.stop()


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_a_loose_key_file_is_refused_with_the_chmod_to_run(tmp_path: Path, mode: int) -> None:
    key = tmp_path / "recorder.key"
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, os.urandom(32).hex().encode() + b"\n")
    os.close(fd)
    key.chmod(mode)
    r = _recorder(tmp_path, key)
    assert r.returncode == 2
    assert f"run: chmod 600 {key}" in r.stderr and f"{mode:04o}" in r.stderr
    assert "Traceback" not in r.stderr
    runtime = subprocess.run(
        [sys.executable, "-m", "mecharm.runtime.cli", "--recorder-key-file", str(key),
         "--data-root", str(tmp_path / "data"), "--trials", "1"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert runtime.returncode == 2 and f"run: chmod 600 {key}" in runtime.stderr
    assert "Traceback" not in runtime.stderr


def _data(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    d.mkdir(exist_ok=True)
    return d
