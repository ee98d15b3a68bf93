"""The top camera recorded as video through the whole trial (docs/top-camera.md).

The writer on its own (real files, PyAV reading them back, a fake at the disk boundary for a
full disk and a stalled one), then whole trials on the real daemon + SimArm and the simulated
workcell's top camera: the files a trial leaves, and decisions that do not depend on the
recording, whether it works, fails or stalls.
"""

from __future__ import annotations

import asyncio
import csv
import errno
import io
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np
import pytest

from mecharm.cameras import SyntheticCamera
from mecharm.cameras.jpeg import jpeg_size
from mecharm.cameras.threaded import ThreadedCamera
from mecharm.common.layout import TOP_VIDEO, DataRoot
from mecharm.runtime import topvideo
from mecharm.runtime import trial as trial_mod
from mecharm.runtime.config import RuntimeSettings
from mecharm.runtime.records.trace import read_trace
from mecharm.runtime.rigsetup import open_rig
from mecharm.runtime.topvideo import TopVideo, TopVideoWriter
from mecharm.runtime.trial import TrialSummary, run_trial
from mecharm.sim.workcell import Workcell, start_workcell

from .conftest import SimDaemon, trial_settings

SEED = 1


def _jpeg(n: int, w: int = 160, h: int = 120) -> bytes:
    img = np.full((h, w, 3), (n * 13) % 255, np.uint8)
    cv2.putText(img, str(n), (5, h // 2), cv2.FONT_HERSHEY_SIMPLEX, 1, (255, 255, 255), 2)
    return bytes(cv2.imencode(".jpg", img)[1].tobytes())


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _packets(path: Path) -> list[bytes]:
    with av.open(str(path)) as c:
        return [bytes(p) for p in c.demux(video=0) if p.size]


def _decoded(path: Path) -> int:
    with av.open(str(path)) as c:
        return sum(1 for _ in c.decode(video=0))


def _until(cond: Any, what: str) -> None:
    for _ in range(3000):
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError(f"never reached: {what}")


# ------------------------------------------------------------------ the writer alone


def test_writer_stores_the_cameras_jpeg_bytes_and_one_log_row_per_packet(tmp_path: Path) -> None:
    w = TopVideoWriter(tmp_path / "v.mkv", tmp_path / "v.csv", fps=10.0, queue_size=100)
    w.start()
    jpegs = [_jpeg(n) for n in range(30)]
    t0, m0 = 1_700_000_000.0, 5_000_000_000
    for n, j in enumerate(jpegs):  # a 30 fps camera: every third frame is kept at 10 fps
        w.offer(j, t0 + n / 30, m0 + round(n * 1e9 / 30))
    st = w.stop(30.0)
    assert st.to_dict() == {"status": "ok", "frames": 10, "dropped": 0, "reason": ""}
    rows = _rows(tmp_path / "v.csv")
    assert (tmp_path / "v.csv").read_text().splitlines()[0] == "frame_idx,capture_ts,mono_ns"
    assert [int(r["frame_idx"]) for r in rows] == list(range(10))
    assert [int(r["mono_ns"]) for r in rows] == [m0 + round(n * 1e9 / 30) for n in range(0, 30, 3)]
    assert [float(r["capture_ts"]) for r in rows] == pytest.approx(
        [t0 + n / 30 for n in range(0, 30, 3)], abs=1e-6
    )
    # stream copy: packet n of the file is the camera's JPEG n, byte for byte
    assert _packets(tmp_path / "v.mkv") == jpegs[::3]
    assert _decoded(tmp_path / "v.mkv") == 10
    with av.open(str(tmp_path / "v.mkv")) as c:
        s = c.streams.video[0]
        assert s.codec_context.name == "mjpeg" and (s.width, s.height) == (160, 120)
        pts = [p.pts for p in c.demux(video=0) if p.size]
        assert [round(float(p * s.time_base), 3) for p in pts] == [
            round(n / 10, 3) for n in range(10)
        ]


def test_every_frame_at_fps_zero_and_raw_frames_are_encoded(tmp_path: Path) -> None:
    w = TopVideoWriter(tmp_path / "v.mkv", tmp_path / "v.csv", fps=0.0, queue_size=100)
    w.start()
    for n in range(7):
        img = np.full((48, 64, 3), n * 30, np.uint8)
        w.offer(img, 1.0 + n / 100, 10**9 + n * 10**7)
    assert w.stop(30.0).frames == 7
    assert _decoded(tmp_path / "v.mkv") == 7 and len(_rows(tmp_path / "v.csv")) == 7


def test_jpeg_size_reads_the_frame_header() -> None:
    assert jpeg_size(_jpeg(1, 320, 200)) == (320, 200)
    assert jpeg_size(b"not a jpeg") is None


class FullDisk(io.RawIOBase):
    """The video file on a disk that fills up after ``room`` bytes (the disk boundary)."""

    def __init__(self, path: Path, room: int) -> None:
        self.fh = open(path, "xb")  # noqa: SIM115
        self.room = room

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        if self.fh.tell() + len(b) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.fh.write(b)

    def seek(self, *a: Any) -> int:
        return self.fh.seek(*a)

    def tell(self) -> int:
        return self.fh.tell()

    def close(self) -> None:
        self.fh.close()
        super().close()


def test_a_full_disk_mid_way_loses_top_frames_only_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(topvideo, "open_video_file", lambda p: FullDisk(p, 200_000))
    w = TopVideoWriter(tmp_path / "v.mkv", tmp_path / "v.csv", fps=0.0, queue_size=1000)
    w.start()
    big = _jpeg(0, 1280, 720)
    for n in range(200):  # the tap never raises, also after the failure
        w.offer(big, 1.0 + n, 10**9 + n * 10**8)
    st = w.stop(30.0)
    assert st.status == "partial" and "(ENOSPC)" in st.reason, st
    assert st.frames > 0 and st.frames + st.dropped == 200
    rows = _rows(tmp_path / "v.csv")
    assert len(rows) == st.frames  # the log lists the packets handed to the file


def test_an_unopenable_video_file_is_failed_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "v.mkv").mkdir()  # the path cannot be opened as a file
    w = TopVideoWriter(tmp_path / "v.mkv", tmp_path / "v.csv", fps=0.0)
    w.start()
    for n in range(5):
        w.offer(_jpeg(n), 1.0 + n, 10**9 + n * 10**8)
    st = w.stop(30.0)
    assert st.status == "failed" and st.frames == 0 and "File exists" in st.reason, st
    assert st.dropped == 5  # the first frame failed to be written, the rest were dropped


def test_the_video_never_takes_the_last_free_space_of_the_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(topvideo, "MIN_FREE_BYTES", 1 << 62)  # more than any disk has
    w = TopVideoWriter(tmp_path / "v.mkv", tmp_path / "v.csv", fps=0.0)
    w.start()
    w.offer(_jpeg(0), 1.0, 10**9)
    st = w.stop(30.0)
    assert st.status == "failed" and "MB kept for the trial's records" in st.reason, st
    assert not (tmp_path / "v.mkv").exists()


class Stalled(io.RawIOBase):
    """A disk that does not answer until ``go`` is set."""

    def __init__(self, path: Path, go: threading.Event) -> None:
        self.fh = open(path, "xb")  # noqa: SIM115
        self.go = go

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self.go.wait()
        return self.fh.write(b)

    def seek(self, *a: Any) -> int:
        return self.fh.seek(*a)

    def tell(self) -> int:
        return self.fh.tell()

    def close(self) -> None:
        self.fh.close()
        super().close()


def test_a_stalled_writer_never_blocks_the_camera_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    go = threading.Event()
    monkeypatch.setattr(topvideo, "open_video_file", lambda p: Stalled(p, go))
    cam = ThreadedCamera(SyntheticCamera(fps=60, width=320, height=240))
    cam.open()
    tv = TopVideo(cam, fps=0.0, queue_size=5, stop_wait_s=30.0)
    try:
        tv.start(tmp_path / "v.mkv", tmp_path / "v.csv")
        w = tv._writer
        assert w is not None
        _until(lambda: w.dropped >= 20, "20 frames dropped: the queue is full")
        # the reader is not held up: the one reading the camera still gets new frames
        monos = []
        for _ in range(10):
            f = cam.read()
            assert f.ok
            monos.append(f.mono_ns)
        assert monos == sorted(set(monos))
        assert cam.frames_read > w.offered - 1 and w._q.full()
        go.set()
        st = tv.stop()
    finally:
        go.set()
        cam.close()
    assert st["status"] == "partial" and st["dropped"] >= 20 and st["frames"] > 0, st
    assert "dropped" in st["reason"]
    assert _decoded(tmp_path / "v.mkv") == st["frames"] == len(_rows(tmp_path / "v.csv"))


def test_stop_and_abandon_take_the_tap_off_the_camera_every_trial(tmp_path: Path) -> None:
    """The tap is the writer's bound method, a new object at each attribute access: three
    trials in a row must leave no tap behind (a dead tap per trial would pile up)."""
    cam = ThreadedCamera(SyntheticCamera(fps=60, width=64, height=48))
    cam.open()
    tv = TopVideo(cam, fps=0.0, stop_wait_s=30.0)
    try:
        for n in range(3):
            tv.start(tmp_path / f"v{n}.mkv", tmp_path / f"v{n}.csv")
            w = tv._writer
            assert w is not None and len(cam._taps) == 1
            _until(lambda w=w: w.frames >= 2, "2 frames written")
            assert tv.stop()["status"] == "ok"
            assert cam._taps == ()
            offered = w.offered
            _until(lambda n0=cam.frames_read: cam.frames_read >= n0 + 5, "5 more frames")
            assert w.offered == offered  # it takes no frame after its stop
        tv.start(tmp_path / "cut.mkv", tmp_path / "cut.csv")
        w = tv._writer
        assert w is not None
        tv.abandon()  # a trial cut short
        assert cam._taps == ()
        _until(lambda: not w._thread.is_alive(), "the abandoned writer ends")
    finally:
        cam.close()


def test_a_recording_starts_with_the_cameras_newest_frame_unless_it_is_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 4 fps camera: the recording must not wait up to 0.25 s (longer under load) for the
    next frame to cover the trial's first instant; a stalled camera's old frame is not used."""
    cam = ThreadedCamera(SyntheticCamera(fps=4, width=64, height=48))
    cam.open()
    tv = TopVideo(cam, fps=0.0, stop_wait_s=30.0)
    try:
        _until(lambda: cam.newest() is not None, "a first frame")
        for name, max_age, fresh in (("fresh", 1.0, True), ("stale", 0.0, False)):
            monkeypatch.setattr(topvideo, "PREROLL_MAX_AGE_S", max_age)
            newest = cam.newest()
            assert newest is not None
            started = time.monotonic_ns()
            tv.start(tmp_path / f"{name}.mkv", tmp_path / f"{name}.csv")
            w = tv._writer
            assert w is not None
            _until(lambda w=w: w.frames >= 2, "2 frames written")
            assert tv.stop()["status"] == "ok"
            first = int(_rows(tmp_path / f"{name}.csv")[0]["mono_ns"])
            if fresh:  # the newest frame, or one that came between the two reads above
                assert newest[2] <= first <= started
            else:
                assert first > started
    finally:
        cam.close()


# ------------------------------------------------------------------ whole trials


@pytest.fixture
def workcell(sim_daemon: SimDaemon) -> Iterator[Workcell]:
    wc = start_workcell(sim_daemon.arm, "standard", SEED, camera_port=0)
    yield wc
    wc.close()


def _settings(root: Path, fk: Path, d: SimDaemon, wc: Workcell, **kw: Any) -> RuntimeSettings:
    return trial_settings(
        root, fk, daemon_port=d.port, top_camera=wc.urls["top"], rig_id="rig-A.1",
        tags=["dusk", "pad-v2"], **kw,
    )  # fmt: skip


async def _trial(
    wc: Workcell, settings: RuntimeSettings, delivered: list[tuple[float, int]] | None = None
) -> tuple[TrialSummary, dict[str, Any]]:
    """One trial of the same scene; ``delivered``: every (wall, mono) the top camera gave."""
    wc.next_scene(SEED)
    Path(settings.data_root).mkdir(parents=True, exist_ok=True)
    async with open_rig(settings) as (rig, _client):
        if delivered is not None:
            assert rig.top_video is not None
            rig.top_video.camera.add_tap(lambda d, wall, mono: delivered.append((wall, mono)))
            for _ in range(3000):  # a camera just opened gives its first frame a while later
                if delivered:
                    break
                await asyncio.sleep(0.01)
        t = await run_trial(rig, scene_seed=SEED)
    return t, json.loads((t.run_dir / f"{t.run_stem}.json").read_text())


#: the scene's trial with the top video off, run once per worker and compared with by every
#: test here (the scene, the empty memories and the arm's start at HOME are the same for all)
_BASELINE: list[tuple[TrialSummary, dict[str, Any]]] = []


async def _baseline(
    root: Path, fk: Path, d: SimDaemon, wc: Workcell
) -> tuple[TrialSummary, dict[str, Any]]:
    if not _BASELINE:
        _BASELINE.append(await _trial(wc, _settings(root, fk, d, wc, top_video=False)))
    return _BASELINE[0]


def _decisions(t: TrialSummary) -> list[dict[str, Any]]:
    return [
        e for e in read_trace(t.trace_path) if e["event"] in ("decision", "transition", "result")
    ]


def assert_same_decisions(a: TrialSummary, b: TrialSummary) -> None:
    """What test_e2e holds two runs of one scene to: the same decisions in the same stages, the
    same table rows, commanded angles within the camera noise's half a degree."""
    da, db = _decisions(a), _decisions(b)
    assert [(e["event"], e.get("kind"), e.get("stage")) for e in da] == [
        (e["event"], e.get("kind"), e.get("stage")) for e in db
    ]
    sel = [[e["value"].get("selected_index") for e in d if e.get("kind") == "lookup"] for d in (da, db)]  # fmt: skip
    assert sel[0] == sel[1]
    cmds = [[e["value"]["angles"] for e in d if e.get("kind") == "command"] for d in (da, db)]
    for x, y in zip(*cmds, strict=True):
        assert max(abs(p - q) for p, q in zip(x, y, strict=True)) < 0.5
    assert (a.status, a.reason, a.outcome["pick_verdict"], a.outcome["place_verdict"]) == (
        b.status, b.reason, b.outcome["pick_verdict"], b.outcome["place_verdict"]
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_trial_leaves_its_top_video_and_decides_as_without_it(
    sim_daemon: SimDaemon,
    workcell: Workcell,
    tmp_path: Path,
    fk_data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    delivered: list[tuple[float, int]] = []
    started: list[int] = []
    start = TopVideo.start

    def timed_start(tv: TopVideo, video: Path, frame_log: Path) -> None:
        start(tv, video, frame_log)
        started.append(time.monotonic_ns())

    monkeypatch.setattr(TopVideo, "start", timed_start)
    on, log = await _trial(
        workcell, _settings(tmp_path / "on", fk_data_dir, sim_daemon, workcell), delivered
    )
    assert on.status == "completed", on.reason
    layout = DataRoot(tmp_path / "on")
    video, flog = layout.top_video(on.run_stem), layout.top_frame_log(on.run_stem)
    rows = _rows(flog)
    assert log["rig_id"] == "rig-A.1" and log["tags"] == ["dusk", "pad-v2"]
    assert log["top_video"] == {"status": "ok", "frames": len(rows), "dropped": 0, "reason": ""}
    assert [int(r["frame_idx"]) for r in rows] == list(range(len(rows)))
    assert _decoded(video) == len(rows) == len(_packets(video))
    kept = [int(r["mono_ns"]) for r in rows]
    # the first frame is the one the camera had when the recording started, not the next one
    # (docs/top-camera.md, "The first frame")
    assert len(started) == 1 and kept[0] <= started[0]
    # in camera time: every frame the camera delivered while recording was kept, but those
    # that came less than 0.8/fps after a kept one (10 fps: the sim's top camera, 10 fps, is
    # recorded whole; its wall-clock rate is what the loaded box lets it render)
    during = [m for _w, m in delivered if kept[0] <= m <= kept[-1]]
    rule, last = [], None
    for m in during:
        if last is None or m - last >= 0.08e9:
            rule.append(m)
            last = m
    assert kept == rule
    # the recording covers every frame a stage judged from (stage images are dated when their
    # frame was captured; the first is the detect stage's, the last the final judge's)
    walls = [float(r["capture_ts"]) for r in rows]
    dated = sorted(p.stat().st_mtime for p in (on.run_dir / "raw").glob("*.jpg"))
    assert len(dated) >= 5 and walls[0] <= dated[0] + 1e-3 and walls[-1] >= dated[-1] - 0.081

    off, log_off = await _baseline(tmp_path / "off", fk_data_dir, sim_daemon, workcell)
    assert log_off["top_video"]["status"] == "off"
    assert not (off.run_dir / TOP_VIDEO).exists()
    assert_same_decisions(on, off)


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("fault", ["full_disk", "stalled_disk", "unopenable"])
async def test_a_failing_top_video_never_changes_the_trial(
    sim_daemon: SimDaemon,
    workcell: Workcell,
    tmp_path: Path,
    fk_data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    fault: str,
) -> None:
    go = threading.Event()
    if fault == "full_disk":  # room for about two seconds of the sim's 1080p top camera
        monkeypatch.setattr(topvideo, "open_video_file", lambda p: FullDisk(p, 2_000_000))
    elif fault == "stalled_disk":  # stalls until the trial is over: every frame but queued lost
        monkeypatch.setattr(topvideo, "open_video_file", lambda p: Stalled(p, go))
        monkeypatch.setattr(TopVideo, "__init__", _short_wait(TopVideo.__init__))
    else:
        # top_camera.mkv is a folder: the path cannot be opened
        monkeypatch.setattr(topvideo, "open_video_file", _folder_in_the_way)
    try:
        bad, log = await _trial(
            workcell, _settings(tmp_path / "bad", fk_data_dir, sim_daemon, workcell)
        )
    finally:
        go.set()
    monkeypatch.undo()
    tv = log["top_video"]
    if fault == "full_disk":
        assert tv["status"] == "partial" and "(ENOSPC)" in tv["reason"] and tv["frames"] > 0, tv
    elif fault == "stalled_disk":
        assert tv["status"] == "failed" and tv["dropped"] > 0, tv
        assert "still busy" in tv["reason"]
    else:
        assert tv["status"] == "failed" and tv["frames"] == 0 and "(EEXIST)" in tv["reason"], tv
    off, _ = await _baseline(tmp_path / "off", fk_data_dir, sim_daemon, workcell)
    assert_same_decisions(bad, off)


def _short_wait(init: Any) -> Any:
    def wrapped(self: TopVideo, *a: Any, **kw: Any) -> None:
        init(self, *a, **{**kw, "stop_wait_s": 0.5})

    return wrapped


def _folder_in_the_way(path: Path) -> Any:
    path.mkdir()
    return open(path, "xb")


# ------------------------------------------------------------------ settings


def test_flags_and_rig_id(tmp_path: Path) -> None:
    from mecharm.common.config import ConfigError, load_settings
    from mecharm.runtime.cli import build_parser
    from mecharm.runtime.config import default_rig_id

    args = vars(build_parser().parse_args(["--no-top-video", "--rig-id", "cell-2.b"]))
    assert args["top_video"] is False and args["rig_id"] == "cell-2.b"
    s = load_settings(RuntimeSettings, overrides={"data_root": tmp_path})
    assert (
        s.viewing.top_video is True
        and s.viewing.top_video_fps == 10.0
        and s.viewing.top_video_queue == 30
    )
    assert s.rig_id == default_rig_id() and 1 <= len(s.rig_id) <= 64
    # observers only: none of them is a constant a replay would compare
    assert not {"top_video", "top_video_fps", "top_video_queue", "rig_id"} & set(s.constants())
    for bad in ("", "a b", "x" * 65, "rig/1"):
        with pytest.raises(ConfigError, match="rig_id"):
            load_settings(RuntimeSettings, overrides={"data_root": tmp_path, "rig_id": bad})


def test_session_tags_are_checked_words_once_each(tmp_path: Path) -> None:
    from mecharm.common.config import ConfigError, load_settings
    from mecharm.runtime.cli import build_parser

    args = vars(build_parser().parse_args(["--tag", "dusk", "--tag", "pad-v2", "--tag", "dusk"]))
    s = load_settings(RuntimeSettings, overrides={"data_root": tmp_path, "tags": args["tags"]})
    assert s.tags == ["dusk", "pad-v2"] and "tags" not in s.constants()
    assert load_settings(RuntimeSettings, overrides={"data_root": tmp_path}).tags == []
    for bad in (["a b"], [""], ["x" * 33], ["<b>"], [f"t{i}" for i in range(9)]):
        with pytest.raises(ConfigError, match="tag"):
            load_settings(RuntimeSettings, overrides={"data_root": tmp_path, "tags": bad})


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_trial_that_raises_leaves_no_tap_and_no_writer_running(
    sim_daemon: SimDaemon,
    workcell: Workcell,
    tmp_path: Path,
    fk_data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not only a cancel: any exception out of the stages stops the recording."""
    writers: list[TopVideoWriter] = []

    async def stages_that_fail(task: Any, ctx: Any, force: Any) -> Any:
        w = rig.top_video._writer if rig.top_video is not None else None
        assert w is not None
        writers.append(w)
        await asyncio.to_thread(_until, lambda: w.frames >= 1, "a top frame written")
        raise RuntimeError("a stage broke")

    monkeypatch.setattr(trial_mod, "run_stages", stages_that_fail)
    settings = _settings(tmp_path / "r", fk_data_dir, sim_daemon, workcell)
    workcell.next_scene(SEED)
    Path(settings.data_root).mkdir(parents=True, exist_ok=True)
    async with open_rig(settings) as (rig, _client):
        with pytest.raises(RuntimeError, match="a stage broke"):
            await run_trial(rig, scene_seed=SEED)
        assert rig.top_video is not None and rig.top_video._writer is None
        assert rig.top_video.camera._taps == ()
        (w,) = writers
        _until(lambda: not w._thread.is_alive(), "the writer thread ends")
        assert w.frames >= 1 and _decoded(w.video) == w.frames


@pytest.mark.parametrize("bad", ["a b", "", "x" * 33, "<b>"])
def test_the_demo_refuses_a_bad_tag_before_starting_anything(
    bad: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from mecharm.tools import demo

    with pytest.raises(SystemExit) as exc:
        demo.main(["--tag", bad, "--data-root", str(tmp_path / "root")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "argument --tag" in err and "1-32 characters of letters, digits" in err
    assert "Traceback" not in err and not (tmp_path / "root").exists()
