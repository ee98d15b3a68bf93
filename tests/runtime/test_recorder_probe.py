"""No silent video loss (docs/recorder.md, "Ping: proving the data root"): before the first
trial the runtime proves a recorder records into its data root; a missing or mis-rooted one
gives a loud warning (or, with require_recorder, a refusal: exit 8) and each trial line says
there is no side video and why. Real recorder service and daemon on 127.0.0.1."""

from __future__ import annotations

import asyncio
import io
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from mecharm.common.layout import META, DataRoot
from mecharm.recorder.config import RecorderSettings, VideoSettings
from mecharm.recorder.sender import RecorderSender
from mecharm.recorder.service import RecorderService
from mecharm.runtime.recorder_link import RecorderLink, recording_text
from mecharm.runtime.records.ledger import RecordingInfo
from mecharm.runtime.rigsetup import RecorderRequired
from mecharm.runtime.service import run_service
from mecharm.tools.simrig import free_port, start_sim_daemon

from .conftest import SimDaemon, trial_settings

#: a top camera that opens at once but shows no mat: each trial stops at detect, quickly,
#: after its first moves; what matters here is the start-up check and the trial lines
TOP = "synthetic?fps=30&w=320&h=240"


@asynccontextmanager
async def _recorder(root: Path) -> AsyncIterator[RecorderService]:
    svc = RecorderService(
        RecorderSettings(
            data_root=root,
            udp_port=free_port(socket.SOCK_DGRAM),
            camera="synthetic?fps=15&w=320&h=240",
            status_interval_sec=0,
            video=VideoSettings(preset="ultrafast"),
        )
    )
    await svc.start()
    try:
        yield svc
    finally:
        await svc.stop()


def _dirs(tmp_path: Path) -> tuple[Path, Path]:
    ours, other = tmp_path / "runtime_root", tmp_path / "recorder_root"
    ours.mkdir()
    other.mkdir()
    return ours, other


async def _link(root: Path, port: int) -> RecorderLink:
    return RecorderLink(RecorderSender(port=port), data_root=root)


@pytest.mark.anyio
async def test_probe_finds_the_same_root_however_it_is_spelled(tmp_path: Path) -> None:
    ours, _ = _dirs(tmp_path)
    os.symlink(ours, tmp_path / "alias")
    async with _recorder(tmp_path / "alias") as svc:
        link = await _link(ours, svc.port)  # type: ignore[arg-type]
        p = await link.probe(5.0)
        assert (p.ok, p.same_root, p.answered, p.port) == (True, True, True, svc.port)
        assert p.root == str(ours.resolve()) and "same data root" in p.detail
        assert link.last_probe is p and p.rtt_ms is not None
        link.close()


@pytest.mark.anyio
async def test_probe_names_another_root_and_a_silent_port(tmp_path: Path, udp_port: int) -> None:
    ours, other = _dirs(tmp_path)
    async with _recorder(other) as svc:
        link = await _link(ours, svc.port)  # type: ignore[arg-type]
        p = await link.probe(5.0)
        assert (p.ok, p.same_root, p.answered, p.root) == (False, False, True, str(other))
        assert p.detail == f"recorder on udp 127.0.0.1:{svc.port} records into {other}"
        assert f"--data-root {ours}" in p.fix and f"--data-root {other}" in p.fix
        link.close()
    link = await _link(ours, udp_port)
    p = await link.probe(0.5)
    assert (p.ok, p.answered, p.root) == (False, False, None)
    assert p.detail == f"recorder not answering on udp 127.0.0.1:{udp_port}"
    assert "not running, or on another port" in p.why and "--recorder-port" in p.fix
    link.close()


@pytest.mark.anyio
async def test_a_recorder_with_another_key_is_told_apart(tmp_path: Path) -> None:
    ours, _ = _dirs(tmp_path)
    async with _recorder(ours) as svc:
        link = RecorderLink(
            RecorderSender(port=svc.port, key=b"not the recorder's key, 32 chars+"),  # type: ignore[arg-type]
            data_root=ours,
        )
        p = await link.probe(0.5)
        assert not p.ok and "another key file" in p.why and "same key file" in p.fix
        assert svc.counters.refused.get("bad_mac", 0) >= 1
        link.close()


@pytest.mark.anyio
async def test_a_disabled_link_sends_nothing_and_says_why() -> None:
    link = RecorderLink(None, off_reason="recorder off: --no-recorder")
    p = await link.probe(5.0)
    assert (p.ok, p.enabled, p.detail) == (False, False, "recorder off: --no-recorder")
    assert recording_text(RecordingInfo(), link) == "rec none (recorder off: --no-recorder)"


def test_the_trial_line_says_whether_side_video_was_recorded(udp_port: int) -> None:
    ok = RecordingInfo(status="ok", frames=120, fps=25.04)
    assert recording_text(ok, None) == "rec ok 120 frames 25.0 fps"
    link = RecorderLink(RecorderSender(port=udp_port))  # enabled, never probed
    none = RecordingInfo(status="none", note=f"no {META} within the wait")
    assert recording_text(none, link) == f"rec none (NO SIDE VIDEO: no {META} within the wait)"
    assert recording_text(none, None) == "rec none"  # callers without the link: as before
    link.close()


async def _service(
    settings: Any, sim_daemon: SimDaemon
) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]], Any]:
    sends: list[dict[str, Any]] = []
    sim_daemon.arm.add_listener(lambda ev, data: sends.append(data) if ev == "send" else None)
    out = io.StringIO()
    with capture_logs() as logs:
        try:
            report = await run_service(settings, out=out)
        except RecorderRequired as exc:
            report = exc
    return out.getvalue(), logs, sends, report


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("wrong", ["port", "root"])
async def test_a_missing_or_misrooted_recorder_is_flagged_before_and_in_every_trial(
    wrong: str, sim_daemon: SimDaemon, tmp_path: Path, fk_data_dir: Path
) -> None:
    ours, other = _dirs(tmp_path)
    async with _recorder(other if wrong == "root" else ours) as svc:
        port = svc.port if wrong == "root" else free_port(socket.SOCK_DGRAM)
        settings = trial_settings(
            ours, fk_data_dir, daemon_port=sim_daemon.port, top_camera=TOP, trials=2,
            recorder_enabled=True, recorder_port=port, recording_wait_s=0.3,
        )  # fmt: skip
        text, logs, _sends, report = await _service(settings, sim_daemon)
    lines = text.splitlines()
    warn = next(i for i, ln in enumerate(lines) if ln.startswith("WARNING: NO SIDE VIDEO"))
    first = next(i for i, ln in enumerate(lines) if ln.startswith("trial 1"))
    assert warn < first, text  # before the first trial
    flag = (
        f"recorder on udp 127.0.0.1:{port} records into {other}"
        if wrong == "root"
        else f"recorder not answering on udp 127.0.0.1:{port}"
    )
    assert flag in lines[warn] and "do:" in text
    trial_lines = [ln for ln in lines if ln.startswith("run_")]
    assert len(trial_lines) == len(report.trials) == 2, text
    for ln in trial_lines:
        assert ln.endswith(f"rec none (NO SIDE VIDEO: {flag})"), ln
    warned = [e for e in logs if e["event"] == "recorder_not_ready"]
    assert len(warned) == 1 and warned[0]["reason"] == flag and warned[0]["fix"]
    if wrong == "root":  # it gets no trial events: no orphan video in a root no ledger indexes
        where = DataRoot(other).recording("run_STEM").dir
        assert (
            f"it gets no trial events from this session (its video would have gone to {where}"
            in text
        )
        assert warned[0]["muted"] is True
        for t in report.trials:
            assert not DataRoot(other).run_dir(t.run_stem).exists()
            assert not DataRoot(ours).recording(t.run_stem).dir.exists()
        assert not DataRoot(other).run_folders.exists() or not any(
            DataRoot(other).run_folders.iterdir()
        )
    else:  # a silent recorder may start late: it is still sent every event
        assert warned[0]["muted"] is False and "no trial events" not in text


@pytest.mark.anyio
async def test_the_right_recorder_gives_no_warning_and_its_video(
    sim_daemon: SimDaemon, tmp_path: Path, fk_data_dir: Path
) -> None:
    ours, _ = _dirs(tmp_path)
    async with _recorder(ours) as svc:
        settings = trial_settings(
            ours, fk_data_dir, daemon_port=sim_daemon.port, top_camera=TOP, trials=1,
            recorder_enabled=True, recorder_port=svc.port,
        )  # fmt: skip
        text, logs, _sends, report = await _service(settings, sim_daemon)
    assert "WARNING" not in text and "NO SIDE VIDEO" not in text, text
    assert f"side video: recorder on udp 127.0.0.1:{svc.port}: same data root" in text
    (t,) = report.trials
    assert t.recording.frames and f"rec {t.recording.status} {t.recording.frames} frames" in text
    assert [e["event"] for e in logs if e["event"].startswith("recorder_")] == ["recorder_ok"]
    # its camera is a test card (asked for by name): the probe and the trial line say so
    assert "same data root, SYNTHETIC test card (open)" in text
    assert "(SYNTHETIC side camera: a test card)" in text


@pytest.mark.anyio
async def test_no_recorder_flag_means_no_warning(
    sim_daemon: SimDaemon, tmp_path: Path, fk_data_dir: Path
) -> None:
    ours, _ = _dirs(tmp_path)
    settings = trial_settings(
        ours, fk_data_dir, daemon_port=sim_daemon.port, top_camera=TOP, trials=1
    )  # recorder_enabled False: --no-recorder
    text, logs, _sends, _report = await _service(settings, sim_daemon)
    assert "WARNING" not in text and "NO SIDE VIDEO" not in text
    assert "rec none (recorder off: --no-recorder)" in text
    assert not [e for e in logs if e["event"].startswith("recorder_")]


@pytest.mark.anyio
async def test_require_recorder_refuses_before_the_arm_moves(
    sim_daemon: SimDaemon, tmp_path: Path, fk_data_dir: Path, udp_port: int
) -> None:
    ours, _ = _dirs(tmp_path)
    settings = trial_settings(
        ours, fk_data_dir, daemon_port=sim_daemon.port, top_camera=TOP, trials=1,
        recorder_enabled=True, recorder_port=udp_port, require_recorder=True,
        recorder_probe_timeout_s=0.5,
    )  # fmt: skip
    text, logs, sends, report = await _service(settings, sim_daemon)
    assert isinstance(report, RecorderRequired)
    assert f"recorder not answering on udp 127.0.0.1:{udp_port}" in str(report)
    assert "require_recorder" in str(report) and "--recorder-port" in str(report)
    assert sends == [] and "trial 1" not in text
    assert [e["event"] for e in logs if e["event"] == "recorder_required"]
    assert not DataRoot(ours).run_folders.exists()


@pytest.mark.slow
def test_require_recorder_flag_exits_8(tmp_path: Path, fk_data_dir: Path, udp_port: int) -> None:
    """As a process, with the flag: the documented exit code and a one-line reason."""
    rig = start_sim_daemon(tmp_path / "logs", scene=None, time_scale=20)
    root = tmp_path / "root"
    root.mkdir()
    cfg = tmp_path / "runtime.yaml"
    cfg.write_text(f"fk_data_dir: {fk_data_dir}\nrecorder:\n  probe_timeout_s: 0.5\n")
    try:
        r = subprocess.run(
            [
                sys.executable, "-m", "mecharm.runtime.cli", "--config", str(cfg),
                "--data-root", str(root), "--daemon-port", str(rig.daemon_port),
                "--top-camera", TOP, "--trials", "1",
                "--recorder-port", str(udp_port), "--require-recorder", "--log-level", "error",
            ],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        rig.daemon.stop()
    assert r.returncode == 8, r.stdout + r.stderr
    msg = [ln for ln in r.stderr.splitlines() if ln.startswith("mecharm-runtime:")]
    assert len(msg) == 1 and msg[0].startswith("mecharm-runtime: refusing to start: recorder")
    assert "--recorder-port" in msg[0] and "(recorder.required is set)" in msg[0]
    assert "Traceback" not in r.stderr and "trial 1" not in r.stdout


@pytest.mark.anyio
async def test_a_trial_the_recorder_holds_for_a_gone_runtime_is_booked_and_handed_over(
    sim_daemon: SimDaemon, tmp_path: Path, fk_data_dir: Path
) -> None:
    """The recorder is recording a trial for a runtime session that is gone (its folder has
    no ledger row): this runtime puts it on the books as interrupted, its first trial_start
    names it, and the recorder hands it over at once: the new trial has its side video."""
    from mecharm.recorder.events import TrialStart

    ours, _ = _dirs(tmp_path)
    gone = "run_0099_20260101_120000"
    async with _recorder(ours) as svc:
        RecorderSender(port=svc.port).notify(TrialStart(run_stem=gone))
        for _ in range(100):
            if svc.trial is not None:
                break
            await asyncio.sleep(0.05)
        assert svc.trial is not None and svc.trial.run_stem == gone
        settings = trial_settings(
            ours, fk_data_dir, daemon_port=sim_daemon.port, top_camera=TOP, trials=1,
            recorder_enabled=True, recorder_port=svc.port,
        )  # fmt: skip
        text, _logs, _sends, report = await _service(settings, sim_daemon)
    assert f"{gone}: no ledger row, now on the books as interrupted" in text, text
    assert "recording a trial of another runtime session" not in text
    (t,) = report.trials
    assert t.recording.status == "ok" and t.recording.frames, text
