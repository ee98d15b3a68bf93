"""Smaller pieces: the MJPEG source inside the service, log rate limiting, the observer rule."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import structlog
from structlog.testing import capture_logs

from mecharm.common.layout import DataRoot
from mecharm.recorder.events import Arrival, Commanded, Gripper, Stage, TrialStart
from mecharm.recorder.status import RateLimitedLog
from mecharm.recorder.trial import state_row

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.anyio
async def test_service_records_from_http_mjpeg_and_reconnects(
    settings_factory, run_recorder, wait_for, mjpeg_server
):
    srv = mjpeg_server(fps=30)
    async with run_recorder(settings_factory(camera=srv.url)) as svc:
        await wait_for(lambda: svc.camera.latest is not None, what="first MJPEG frame")
        from mecharm.recorder.sender import RecorderSender

        path, _, reason = await RecorderSender(port=svc.port).request_frame_async("mjpeg_side")
        assert reason == "ok_orphan"
        import cv2

        data = Path(path).read_bytes()
        n = srv.frame_number(cv2.imread(path))
        assert data == srv.jpeg(n)  # the camera's own JPEG, written as is (no re-encode)
        lost_before = svc.camera.lost_count
        srv.drop_clients()  # the workcell restarts its stream
        await wait_for(lambda: svc.camera.lost_count > lost_before, what="disconnect detected")
        assert svc.camera.latest is None or svc.camera.state == "open"
        await wait_for(
            lambda: svc.camera.state == "open" and svc.camera.latest is not None, what="reconnected"
        )
        assert len(srv.requests) >= 2


def test_rate_limited_log_counts_what_it_suppresses():
    with capture_logs() as logs:
        rl = RateLimitedLog(structlog.get_logger("t"), "event_rejected", per_sec=3)
        for i in range(10):
            rl(i=i)
        rl._window -= 2  # a second later
        rl(i=10)
    names = [e["event"] for e in logs]
    assert names == ["event_rejected"] * 3 + ["event_rejected_suppressed", "event_rejected"]
    assert logs[3]["count"] == 7


def test_state_rows_follow_the_columns():
    row = state_row(
        Commanded(
            ts=10.0,
            angles=[1, 2, 3, 4, 5, 6.5],
            speed=20,
            ts_send=9.5,
            arrived=False,
            attempt=2,
            note="n,with comma",
        ),
        "stage3",
    )
    assert row == [
        "10.0",
        "commanded",
        "stage3",
        "1.0",
        "2.0",
        "3.0",
        "4.0",
        "5.0",
        "6.5",
        "20",
        "",
        "9.5",
        "",
        "2",
        "0",
        "n,with comma",
    ]
    assert state_row(Gripper(ts=1.0, state=20), "s")[10] == "20"
    arrival = state_row(
        Arrival(ts=3.0, ts_send=2.0, ts_arrival=2.5, attempt=1, arrived=True, note="n"), "s"
    )
    assert arrival[:2] == ["3.0", "arrival"] and arrival[11:15] == ["2.0", "2.5", "1", "1"]
    assert state_row(Stage(ts=1.0, stage="stage2"), "stage1")[2] == "stage2"
    assert state_row(TrialStart(ts=1.0, run_stem="r1"), "")[-1] == "r1"


def test_observer_principle_recorder_never_touches_the_arm():
    forbidden = ("mecharm.daemon", "DaemonClient", "send_angles", "5555")
    for path in (REPO / "recorder").rglob("*.py"):
        text = path.read_text()
        assert not any(f in text for f in forbidden), path
    code = (
        "import sys, mecharm.recorder.cli, mecharm.recorder.service, mecharm.recorder.sender, mecharm.cameras;"
        "bad=[m for m in sys.modules if m.startswith(('mecharm.daemon','mecharm.runtime'))];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stdout + r.stderr


class _OddCamera:
    """A device that delivers gray, BGRA, float and broken frames between good ones."""

    spec = "odd"

    def __init__(self) -> None:
        import numpy as np

        from mecharm.cameras import SyntheticCamera

        self.inner = SyntheticCamera(fps=60, width=64, height=48)
        self.n = 0
        self.np = np

    @property
    def is_open(self) -> bool:
        return self.inner.is_open

    def open(self) -> None:
        self.inner.open()

    def close(self) -> None:
        self.inner.close()

    def read(self):
        from mecharm.cameras import Frame

        f = self.inner.read()
        self.n += 1
        img = f.image
        kind = self.n % 5
        if kind == 1:
            img = img[..., 0].copy()  # gray
        elif kind == 2:
            img = self.np.dstack([img, img[..., :1]])  # BGRA
        elif kind == 3:
            img = img.astype(self.np.float32)  # wrong dtype
        elif kind == 4:
            img = self.np.zeros((1,), self.np.uint8)  # not an image
        return Frame(True, img, f.wall_ts, f.mono_ns)


@pytest.mark.anyio
async def test_odd_frames_never_end_the_camera_loop(
    settings_factory, run_recorder, wait_for, data_root
):
    from mecharm.recorder.events import TrialEnd
    from mecharm.recorder.sender import RecorderSender

    async with run_recorder(settings_factory(camera_lost_after=100), camera=_OddCamera()) as svc:
        s = RecorderSender(port=svc.port)
        s.notify(TrialStart(run_stem="odd_run"))
        await wait_for(lambda: svc.trial is not None, what="trial")
        await wait_for(lambda: svc.camera.frames >= 15, what="frames")
        assert svc.camera.failed_reads >= 5
        s.notify(TrialEnd(run_stem="odd_run"))
        await wait_for(lambda: svc.trial is None, what="closed")
        await svc.wait_closed()
    meta = DataRoot(data_root).recording("odd_run").meta
    assert '"frames_written"' in meta.read_text()


def test_backlog_past_the_close_budget_is_counted_dropped(tmp_path):
    import time

    import numpy as np

    from mecharm.recorder.config import RecorderSettings, VideoSettings
    from mecharm.recorder.trial import TrialRecording

    root = tmp_path / "data"
    root.mkdir()
    settings = RecorderSettings(data_root=root, video=VideoSettings(preset="ultrafast"))
    trial = TrialRecording.create(root, "budget_run", settings, "synthetic")
    img = np.zeros((48, 64, 3), np.uint8)
    t = time.monotonic_ns()
    assert trial.write_frame(img, time.time(), t + 1, False)
    trial.close_deadline = time.monotonic() + 60  # closing, budget left: still encoded
    assert trial.write_frame(img, time.time(), t + 2, False)
    trial.close_deadline = time.monotonic() - 1  # budget spent: counted, not encoded
    assert not trial.write_frame(img, time.time(), t + 3, False)
    trial.close_media()
    trial.close_states()
    meta = trial.write_meta()
    assert (meta.frames_captured, meta.frames_written, meta.frames_dropped) == (3, 2, 1)
    assert trial.frames_dropped_at_close == 1


def test_a_recording_the_exporter_would_refuse_is_never_called_ok(tmp_path):
    """Every frame written, but 1.3 s without one: the meta says ``stalled`` with the
    exporter's reason, and the trial line says it is not exportable."""
    import time

    import numpy as np

    from mecharm.common.framegaps import stall_problem
    from mecharm.recorder.config import RecorderSettings, VideoSettings
    from mecharm.recorder.trial import TrialRecording
    from mecharm.runtime.recorder_link import recording_text
    from mecharm.runtime.records.ledger import _read_meta

    root = tmp_path / "data"
    root.mkdir()
    settings = RecorderSettings(data_root=root, video=VideoSettings(preset="ultrafast"))
    img = np.zeros((48, 64, 3), np.uint8)
    for stem, gap in (("steady_run", 0.0), ("stalled_run", 1.3)):
        trial = TrialRecording.create(root, stem, settings, "synthetic")
        wall, mono = time.time(), time.monotonic_ns()
        for i in range(40):
            t = i / 20 + (gap if i >= 20 else 0.0)
            assert trial.write_frame(img, wall + t, mono + int(t * 1e9), False)
        trial.close_media()
        trial.close_states()
        meta = trial.write_meta()
        trial.release()
        if gap == 0.0:
            assert meta.status == "ok" and meta.status_reason == ""
            continue
        assert meta.status == "stalled"
        assert meta.status_reason == stall_problem(trial.capture_ts)
        assert meta.status_reason.startswith("camera stalled: 1.35 s without a frame at 1.0 s")
        info = _read_meta(trial.files.meta, root)
        assert info is not None and info.status == "stalled"
        line = recording_text(info, None)
        assert line.startswith("rec stalled 40 frames ")
        assert line.endswith(f"(NOT EXPORTABLE: {meta.status_reason})")
