"""The recorder service end to end: real UDP sockets, the synthetic camera, real files."""

from __future__ import annotations

import asyncio
import csv
import json
import shutil
import time
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from structlog.testing import capture_logs

from mecharm.cameras import SyntheticCamera
from mecharm.common.layout import FRAME_LOG, META, SNAPSHOTS, STATES, VIDEO, DataRoot
from mecharm.recorder.events import (
    FRAME_LOG_COLUMNS,
    STATES_COLUMNS,
    Commanded,
    Gripper,
    Measured,
    RecordingMeta,
    Stage,
    TrialEnd,
    TrialStart,
)
from mecharm.recorder.sender import RecorderSender

STEM = "run_0001_20260101_120000"
STEM2 = "run_0002_20260101_120100"


def rec_dir(root: Path, stem: str) -> Path:
    return DataRoot(root).recording(stem).dir


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def load_meta(root: Path, stem: str) -> RecordingMeta:
    return RecordingMeta.model_validate_json((rec_dir(root, stem) / META).read_text())


async def settle(svc, n_events: int, wait_for) -> None:
    await wait_for(lambda: svc.counters.events >= n_events, what=f"{n_events} events processed")


@pytest.mark.anyio
async def test_full_trial(settings_factory, run_recorder, wait_for, data_root):
    settings = settings_factory()
    async with run_recorder(settings) as svc:
        s = RecorderSender(port=svc.port)
        await wait_for(lambda: svc.camera.latest is not None, what="first frame")
        s.notify(TrialStart(run_stem=STEM))
        s.notify(Stage(stage="stage1"))
        for i in range(3):
            t = time.time()
            s.notify(
                Commanded(
                    angles=[i, 10, -20, 0, -45, -30],
                    speed=20,
                    ts_send=t,
                    ts_arrival=t + 0.5,
                    attempt=1,
                    arrived=True,
                    note=f"move{i}",
                )
            )
        s.notify(Gripper(state=100, note="open_gripper_home:open: initial open"))
        for i in range(5):
            s.notify(Measured(angles=[i * 0.5, 10, -20, 0, -45, -30]))
        await settle(svc, 11, wait_for)
        path, _capture_ts, reason = await s.request_frame_async("stage8_5_side")
        await asyncio.sleep(1.2)
        s.notify(TrialEnd(run_stem=STEM))
        await settle(svc, 13, wait_for)
        await svc.wait_closed()
    d = rec_dir(data_root, STEM)
    assert {p.name for p in d.iterdir()} == {VIDEO, FRAME_LOG, STATES, META, SNAPSHOTS}
    # frame_request in a trial: ok, jpg in extracted/
    assert reason == "ok" and Path(path).parent == d / SNAPSHOTS
    assert cv2.imread(path).shape == (240, 320, 3)
    # states.csv: exact columns, one row per event
    cols, rows = read_csv(d / STATES)
    assert tuple(cols) == STATES_COLUMNS
    kinds = [r["event_type"] for r in rows]
    assert (
        kinds.count("commanded") == 3
        and kinds.count("measured") == 5
        and kinds.count("gripper") == 1
    )
    assert kinds[0] == "trial_start" and kinds[-1] == "trial_end" and "frame_request" in kinds
    cmd = [r for r in rows if r["event_type"] == "commanded"]
    assert [r["j0"] for r in cmd] == ["0.0", "1.0", "2.0"] and cmd[0]["speed"] == "20"
    assert cmd[0]["arrived"] == "1" and cmd[0]["stage"] == "stage1" and cmd[0]["note"] == "move0"
    assert float(cmd[0]["ts_arrival"]) - float(cmd[0]["ts_send"]) == pytest.approx(0.5)
    meas = [r for r in rows if r["event_type"] == "measured"]
    assert meas[4]["j0"] == "2.0" and meas[0]["j5"] == "-30.0"
    # frame_log: exact columns, increasing stamps, consistent with meta and the mp4
    cols, frames = read_csv(d / FRAME_LOG)
    assert tuple(cols) == FRAME_LOG_COLUMNS
    idx = [int(f["frame_idx"]) for f in frames]
    wall = np.array([float(f["capture_ts"]) for f in frames])
    mono = np.array([int(f["capture_mono_ns"]) for f in frames])
    assert idx == list(range(len(frames))) and len(frames) >= 30
    assert (np.diff(wall) > 0).all() and (np.diff(mono) > 0).all()
    meta = load_meta(data_root, STEM)
    assert meta.status == "ok" and meta.run_stem == STEM
    assert meta.frames_written == len(frames) == meta.frames_captured
    fps = (len(frames) - 1) / ((mono[-1] - mono[0]) / 1e9)
    # paced at 30 fps: never faster (a loaded machine can only make it slower)
    assert meta.effective_fps == pytest.approx(fps, rel=1e-3) and 0 < fps <= 30 * 1.1
    assert (meta.width, meta.height, meta.codec, meta.pix_fmt) == (320, 240, "h264", "yuv420p")
    assert meta.gop == 30 and meta.container_fps == 30
    assert meta.anchor_mono_ns == mono[0] and meta.anchor_wall_ts == wall[0]
    assert meta.started_ts <= wall[0] and meta.ended_ts >= wall[-1]
    assert meta.elapsed_sec == pytest.approx(meta.ended_ts - meta.started_ts, abs=1e-3)
    assert data_root / meta.recording_path == d
    assert meta.states_rows == len(rows) and meta.frame_requests == 1
    # wall = anchor_wall + (mono - anchor_mono): each frame reads the two clocks back to back,
    # so they agree within a few ms, exactly at the anchor; a frame whose thread lost the CPU
    # (or the GIL) between the two reads is off by that wait (29.5 ms once, beside two CPU
    # burners): the typical frame is what is checked, not the worst
    dev = np.abs(wall - (meta.anchor_wall_ts + (mono - meta.anchor_mono_ns) / 1e9))
    assert dev[0] == 0.0 and np.median(dev) < 0.005, dev
    with av.open(str(d / VIDEO)) as c:
        pts_ms = [float(f.pts * f.time_base) * 1000 for f in c.decode(video=0)]
    assert len(pts_ms) == len(frames)
    assert np.allclose(pts_ms, (mono - mono[0]) / 1e6, atol=0.05)


@pytest.mark.anyio
async def test_frame_request_outside_trial_goes_to_orphans(
    settings_factory, run_recorder, wait_for, data_root
):
    synth = SyntheticCamera(fps=30, width=320, height=240)
    synth.faults.disconnect()
    async with run_recorder(settings_factory(), camera=synth) as svc:
        s = RecorderSender(port=svc.port)
        assert await s.request_frame_async("early") == (None, None, "no_frame_available")
        synth.faults.reconnect()
        await wait_for(lambda: svc.camera.latest is not None, what="first frame")
        path, ts, reason = await s.request_frame_async("between_trials")
    assert reason == "ok_orphan"
    assert Path(path).parent == DataRoot(data_root).orphan_frames
    assert Path(path).name.startswith("between_trials_") and abs(ts - time.time()) < 10
    assert not (data_root / "runs").exists()


@pytest.mark.slow
@pytest.mark.anyio
async def test_stale_frame_answered_while_read_blocks(settings_factory, run_recorder, wait_for):
    synth = SyntheticCamera(fps=30, width=320, height=240)
    async with run_recorder(settings_factory(), camera=synth) as svc:
        s = RecorderSender(port=svc.port)
        await wait_for(lambda: svc.camera.latest is not None, what="first frame")
        synth.faults.stall(3.0)  # the camera thread now sits in read() for 3 s
        await wait_for(
            lambda: time.monotonic_ns() - svc.camera.latest.mono_ns > 0.1e9, what="stall"
        )
        frames_before = svc.camera.frames
        young = await s.request_frame_reply_async("young")
        await asyncio.sleep(0.5)
        old = await s.request_frame_reply_async("old")
        frames_after = svc.camera.frames
    # both answered while read() was still blocked (no new frame arrived meanwhile)
    assert frames_before == frames_after
    assert old.reason == "stale_frame" and old.frame_age_ms > 500 and old.path is None
    assert young.frame_age_ms < old.frame_age_ms
    # the newest frame's age alone decides (young is ~100 ms old unless the machine is loaded)
    assert young.reason == ("stale_frame" if young.frame_age_ms > 500 else "ok_orphan")
    assert (young.path is None) == (young.reason == "stale_frame")


@pytest.mark.anyio
async def test_camera_loss_and_recovery(settings_factory, run_recorder, wait_for, data_root):
    synth = SyntheticCamera(fps=30, width=320, height=240)
    with capture_logs() as logs:
        async with run_recorder(settings_factory(), camera=synth) as svc:
            s = RecorderSender(port=svc.port)
            await wait_for(lambda: svc.camera.latest is not None, what="first frame")
            s.notify(TrialStart(run_stem=STEM))
            await settle(svc, 1, wait_for)
            await asyncio.sleep(0.4)
            synth.faults.disconnect()
            await wait_for(lambda: svc.camera.state == "lost", what="camera_lost")
            # the last frame is forgotten: never served as if current
            assert await s.request_frame_async("during_loss") == (None, None, "no_frame_available")
            await asyncio.sleep(0.5)  # several reopen attempts with the cooldown
            synth.faults.reconnect()
            await wait_for(
                lambda: svc.camera.state == "open" and svc.camera.latest is not None,
                what="recovery",
            )
            _, _, reason = await s.request_frame_async("after_recovery")
            await asyncio.sleep(0.4)
            s.notify(TrialEnd(run_stem=STEM))
            await settle(svc, 4, wait_for)
            await svc.wait_closed()
    assert reason == "ok"
    meta = load_meta(data_root, STEM)
    assert (
        meta.status == "camera_lost"
        and meta.camera_lost_count == 1
        and "consecutive" in meta.status_reason
    )
    _, frames = read_csv(rec_dir(data_root, STEM) / FRAME_LOG)
    mono = np.array([int(f["capture_mono_ns"]) for f in frames])
    assert np.diff(mono).max() > 0.4e9  # the gap, with frames on both sides of it
    assert meta.frames_written == len(frames)
    events = [e["event"] for e in logs]
    assert "camera_lost" in events and "camera_recovered" in events


@pytest.mark.anyio
async def test_frozen_feed_is_detected(settings_factory, run_recorder, wait_for, data_root):
    synth = SyntheticCamera(fps=30, width=320, height=240)
    with capture_logs() as logs:
        async with run_recorder(settings_factory(), camera=synth) as svc:
            s = RecorderSender(port=svc.port)
            await wait_for(lambda: svc.camera.latest is not None, what="first frame")
            s.notify(TrialStart(run_stem=STEM))
            await settle(svc, 1, wait_for)
            live = await s.request_frame_reply_async("live")
            synth.faults.freeze()
            await wait_for(lambda: svc.camera.frozen, what="frozen detection")
            frozen = await s.request_frame_reply_async("frozen")
            await asyncio.sleep(0.3)
            synth.faults.freeze(False)
            await wait_for(lambda: not svc.camera.frozen, what="unfrozen")
            s.notify(TrialEnd(run_stem=STEM))
            await settle(svc, 4, wait_for)
            await svc.wait_closed()
    assert live.reason == "ok" and not live.camera_frozen
    assert frozen.reason == "ok" and frozen.camera_frozen  # still served, but flagged
    meta = load_meta(data_root, STEM)
    assert meta.camera_frozen and meta.frozen_sec >= 0.2 and meta.status == "ok"
    events = [e["event"] for e in logs]
    assert "camera_frozen" in events and "camera_unfrozen" in events


@pytest.mark.anyio
async def test_mount_loss_mid_trial(settings_factory, run_recorder, wait_for, data_root):
    with capture_logs() as logs:
        async with run_recorder(settings_factory()) as svc:
            s = RecorderSender(port=svc.port)
            await wait_for(lambda: svc.camera.latest is not None, what="first frame")
            s.notify(TrialStart(run_stem=STEM))
            await settle(svc, 1, wait_for)
            await asyncio.sleep(0.3)
            shutil.rmtree(data_root)  # the SSD is gone
            await wait_for(lambda: svc.trial is None, what="trial aborted")
            await svc.wait_closed()
            assert await s.request_frame_async("no_disk") == (None, None, "mount_lost")
            s.notify(TrialStart(run_stem=STEM2))
            await settle(svc, 3, wait_for)
            assert svc.trial is None
            assert not data_root.exists()  # never recreated as a local folder
            data_root.mkdir()  # the SSD comes back
            s.notify(TrialStart(run_stem=STEM2))
            await settle(svc, 4, wait_for)
            await asyncio.sleep(0.3)
            s.notify(TrialEnd(run_stem=STEM2))
            await settle(svc, 5, wait_for)
            await svc.wait_closed()
    by_event = {e["event"]: e for e in logs}
    assert by_event["trial_aborted"]["run_stem"] == STEM
    assert (
        "meta_write_failed" in by_event and by_event["meta_write_failed"]["status"] == "mount_lost"
    )
    assert "is gone" in by_event["trial_start_refused"]["reason"]
    assert load_meta(data_root, STEM2).status == "ok"
    assert not rec_dir(data_root, STEM).exists()


@pytest.mark.anyio
async def test_double_trial_start_truncates_and_stray_trial_end_is_logged(
    settings_factory, run_recorder, wait_for, data_root
):
    with capture_logs() as logs:
        async with run_recorder(settings_factory()) as svc:
            s = RecorderSender(port=svc.port)
            await wait_for(lambda: svc.camera.latest is not None, what="first frame")
            s.notify(TrialEnd(run_stem=STEM))  # no trial open
            s.notify(TrialStart(run_stem=STEM))
            await settle(svc, 2, wait_for)
            await asyncio.sleep(0.3)
            s.notify(TrialStart(run_stem=STEM2))
            s.notify(TrialEnd(run_stem=STEM))  # not the open trial: ignored
            await settle(svc, 4, wait_for)
            assert svc.trial is not None and svc.trial.run_stem == STEM2
            await asyncio.sleep(0.3)
            s.notify(TrialEnd(run_stem=STEM2))
            s.notify(TrialStart(run_stem=STEM2))  # that recording exists: never overwritten
            await settle(svc, 6, wait_for)
            await svc.wait_closed()
    first, second = load_meta(data_root, STEM), load_meta(data_root, STEM2)
    assert first.status == "truncated" and "second trial_start" in first.status_reason
    assert second.status == "ok" and second.frames_written > 0
    events = [e["event"] for e in logs]
    assert "trial_end_without_trial" in events and "trial_end_mismatch" in events
    assert any(
        e["event"] == "trial_start_refused" and "already exists" in e["reason"] for e in logs
    )


@pytest.mark.anyio
async def test_shutdown_closes_open_trial_truncated(
    settings_factory, run_recorder, wait_for, data_root
):
    async with run_recorder(settings_factory()) as svc:
        s = RecorderSender(port=svc.port)
        await wait_for(lambda: svc.camera.latest is not None, what="first frame")
        s.notify(TrialStart(run_stem=STEM))
        await settle(svc, 1, wait_for)
        await asyncio.sleep(0.3)
    meta = load_meta(data_root, STEM)
    assert (
        meta.status == "truncated" and meta.status_reason == "shutdown" and meta.frames_written > 0
    )


@pytest.mark.anyio
async def test_csvs_are_flushed_within_a_second(
    settings_factory, run_recorder, wait_for, data_root
):
    async with run_recorder(settings_factory(csv_flush_sec=0.5)) as svc:
        s = RecorderSender(port=svc.port)
        await wait_for(lambda: svc.camera.latest is not None, what="first frame")
        s.notify(TrialStart(run_stem=STEM))
        for i in range(4):
            s.notify(Measured(angles=[i, 0, 0, 0, 0, 0]))
        await settle(svc, 5, wait_for)
        d = rec_dir(data_root, STEM)

        def on_disk() -> (
            bool
        ):  # four short rows never fill a write buffer: only the timed flush shows them
            states = read_csv(d / STATES)[1] if (d / STATES).exists() else []
            frames = read_csv(d / FRAME_LOG)[1] if (d / FRAME_LOG).exists() else []
            return [r["event_type"] for r in states].count("measured") == 4 and len(frames) >= 15

        await wait_for(on_disk, timeout=30, what="rows flushed while the trial is open")
        assert svc.trial is not None  # still open: nothing was closed to force the flush


@pytest.mark.anyio
async def test_events_outside_a_trial_are_ignored_and_status_is_reported(
    settings_factory, run_recorder, wait_for, data_root
):
    with capture_logs() as logs:
        async with run_recorder(settings_factory(status_interval_sec=0.2)) as svc:
            s = RecorderSender(port=svc.port)
            s.notify(Stage(stage="stage1"))
            s.notify(Commanded(angles=[0] * 6))
            await settle(svc, 2, wait_for)
            await wait_for(
                lambda: any(e["event"] == "recorder_status" for e in logs), what="status line"
            )
            status = svc.status()
    assert svc.counters.ignored_no_trial == 2 and not (data_root / "runs").exists()
    line = next(e for e in logs if e["event"] == "recorder_status")
    for key in ("trial", "fps", "frames", "dropped", "last_event_age_s", "camera"):
        assert key in line and key in status


def _hostile_datagrams(rng: np.random.Generator, n: int, port: int, own_port: int) -> list[bytes]:
    names = [
        "../../etc",
        "/etc/passwd",
        "",
        "a\x00b",
        "x" * 5000,
        "..",
        ".",
        "a/../../b",
        "C:\\windows",
        "~root",
        "-rf",
        " ",
        "\n",
        "é",
        "\u202e",
        7,
        None,
        [],
        {},
        True,
    ]
    # valid ports too: a reply to the recorder's own port must not start a loop
    ports = ["5000", -1, 0, 65536, 1.5, None, True, [], 10**30, port, own_port]
    out: list[bytes] = []
    for i in range(n):
        k = i % 10
        name = names[int(rng.integers(len(names)))]
        if k == 0:
            out.append(rng.bytes(int(rng.integers(0, 400))))
        elif k == 1:
            out.append(b'{"type": "trial_start", "run_stem": ' + rng.bytes(20) + b"}")
        elif k == 2:
            out.append(json.dumps({"type": "trial_start", "run_stem": name}).encode())
        elif k == 3:
            out.append(
                json.dumps({"type": "frame_request", "tag": name, "reply_port": port}).encode()
            )
        elif k == 4:
            rp = ports[int(rng.integers(len(ports)))]
            out.append(
                json.dumps({"type": "frame_request", "tag": "ok_tag", "reply_port": rp}).encode()
            )
        elif k == 5:
            out.append(b'{"type":"commanded","angles":' + json.dumps(name).encode() + b"}")
        elif k == 6:
            out.append(b"{" + b'"a":' * 2000 + b"1")  # deep / broken
        elif k == 7:
            out.append(json.dumps({"type": "trial_end", "run_stem": name, "ts": "x"}).encode())
        elif k == 8:
            out.append(json.dumps({"type": ["stage"], "stage": name}).encode())
        else:
            out.append(b"[" * 30000)  # oversized
    return out


@pytest.mark.anyio
async def test_fuzz_hostile_datagrams_then_a_clean_trial(
    settings_factory, run_recorder, wait_for, tmp_path, data_root
):
    before_tmp = sorted(p.name for p in tmp_path.iterdir())
    before_cwd = sorted(p.name for p in Path.cwd().iterdir())
    reply = RecorderSender()  # a socket for replies we never read
    reply_sock = reply._reply_socket()
    rng = np.random.default_rng(1234)
    async with run_recorder(settings_factory()) as svc:
        datagrams = _hostile_datagrams(rng, 10_000, reply_sock.getsockname()[1], svc.port)
        import socket

        # signed with the key: what a sender holding the key could send gets past the MAC
        # and must still be refused by the strict parser (unsigned floods: tests/chaos)
        signer = RecorderSender(port=svc.port)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            sent = 0
            for i in range(0, len(datagrams), 200):
                for d in datagrams[i : i + 200]:
                    tx.sendto(signer.seal_event(d, None)[1], ("127.0.0.1", svc.port))
                    sent += 1
                await wait_for(lambda s=sent: svc.counters.events >= s, what="fuzz batch processed")
        assert svc.counters.events >= 10_000  # plus the replies it sent to itself
        assert svc.counters.rejected >= 8_000 and svc.counters.frame_requests > 0
        # its replies to its own port are replies, not events: refused, never a loop
        assert svc.counters.refused.get("bad_mac", 0) <= svc.counters.frame_requests
        base = svc.counters.events
        # the recorder still works: a clean trial
        s = RecorderSender(port=svc.port)
        s.notify(TrialStart(run_stem=STEM))
        s.notify(Stage(stage="stage1"))
        await wait_for(lambda: svc.counters.events >= base + 2, what="clean events")
        await asyncio.sleep(0.2)  # the flood spent the frame_request budget (20/s): refill
        _, _, reason = await s.request_frame_async("clean")
        await asyncio.sleep(0.4)
        s.notify(TrialEnd(run_stem=STEM))
        await wait_for(
            lambda: svc.trial is None and svc.counters.trials_started == 1, what="trial_end"
        )
        await svc.wait_closed()
    reply_sock.close()
    assert reason == "ok"
    meta = load_meta(data_root, STEM)
    assert meta.status == "ok" and meta.frames_written > 0
    # nothing was written outside the data root, and nothing with a hostile name inside it
    assert sorted(p.name for p in tmp_path.iterdir()) == before_tmp
    assert sorted(p.name for p in Path.cwd().iterdir()) == before_cwd
    root = data_root.resolve()
    for p in data_root.rglob("*"):
        assert root in p.resolve().parents
        assert ".." not in p.name and "\x00" not in p.name and len(p.name) < 200
    assert {p.name for p in DataRoot(data_root).run_folders.iterdir()} == {STEM}


@pytest.mark.anyio
async def test_frame_request_flood_is_rate_limited_and_endless_trials_are_closed(
    settings_factory, run_recorder, wait_for, data_root
):
    settings = settings_factory(max_frame_requests_per_sec=5, max_trial_sec=0.8)
    async with run_recorder(settings) as svc:
        s = RecorderSender(port=svc.port)
        await wait_for(lambda: svc.camera.latest is not None, what="first frame")
        t0 = time.monotonic()
        replies = await asyncio.gather(
            *(s.request_frame_reply_async(f"flood{i}") for i in range(20))
        )
        span = time.monotonic() - t0
        reasons = [r.reason for r in replies]
        # token bucket: a burst of 5, then 5 per second of the time the flood took
        assert 5 <= reasons.count("ok_orphan") <= 5 + 5 * span + 1
        assert "exception:RateLimited" in reasons
        assert reasons.count("exception:RateLimited") == 20 - reasons.count("ok_orphan")
        written = list(DataRoot(data_root).orphan_frames.iterdir())
        assert len(written) == reasons.count("ok_orphan")
        s.notify(TrialStart(run_stem=STEM))  # and the runtime dies: no trial_end ever comes
        await wait_for(
            lambda: svc.counters.trials_started == 1 and svc.trial is None,
            timeout=5,
            what="trial closed by the limit",
        )
        await svc.wait_closed()
    meta = load_meta(data_root, STEM)
    assert meta.status == "truncated" and "max_trial_sec" in meta.status_reason
