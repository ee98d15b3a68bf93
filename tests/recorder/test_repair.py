"""Crashed recordings (docs/recorder.md, "Crashed recordings"): the repair and the start-up scan.

A crashed folder is made the way a SIGKILL makes it: a real ``TrialRecording`` writes
real frames through the real encoder, and the folder's bytes are copied while it is
still open — what the page cache holds at that instant is exactly what a killed process
leaves. (The SIGKILL of a whole recorder process: tests/chaos/test_recorder_kill.py.)
"""

from __future__ import annotations

import csv
import shutil
import time
from pathlib import Path

import av
import numpy as np
import pytest
from structlog.testing import capture_logs

from mecharm.common.dirlock import hold_dir
from mecharm.common.layout import FRAME_LOG, STATES, VIDEO, DataRoot, RecordingFiles
from mecharm.recorder.config import VideoSettings
from mecharm.recorder.events import (
    Measured,
    RecordingMeta,
    TrialEnd,
    TrialStart,
    parse_recording_meta,
)
from mecharm.recorder.repair import (
    RecordingBusyError,
    RepairError,
    cut_partial_header,
    find_recording,
    probe_video,
    repair_recording,
    unrepaired_recordings,
)
from mecharm.recorder.sender import RecorderSender
from mecharm.recorder.trial import TrialRecording
from mecharm.recorder.video import VideoWriter
from mecharm.tools.cli import main as mecharm_main

from .conftest import make_settings

STEM = "run_0003_20260101_120000"


def _image(i: int) -> np.ndarray:
    img = np.zeros((120, 160, 3), np.uint8)
    img[:, : (i * 5) % 160] = 180
    return img


def crashed_copy(src_root: Path, dst_root: Path, stem: str, frames: int, fps: float = 30.0) -> Path:
    """Record ``frames`` frames into a live trial and copy its folder while still open."""
    settings = make_settings(src_root)
    trial = TrialRecording.create(src_root, stem, settings, "synthetic")
    try:
        trial.add_event(TrialStart(run_stem=stem))
        mono0, wall0 = time.monotonic_ns() + 1_000_000, time.time()
        for i in range(frames):
            dt = round(i * 1e9 / fps)
            assert trial.write_frame(_image(i), wall0 + dt / 1e9, mono0 + dt, False)
            trial.add_event(Measured(angles=[float(i)] * 6))
        trial.flush_states(force=True)
        dst = DataRoot(dst_root).recording(stem).dir
        shutil.copytree(trial.dir, dst)  # the bytes a SIGKILL would leave
    finally:
        trial.close_states()
        trial.close_media()
        trial.release()
    return dst


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path]:
    src, dst = tmp_path / "live", tmp_path / "data"
    src.mkdir()
    dst.mkdir()
    return src, dst


def test_repair_cuts_the_rows_the_mp4_lost_writes_the_meta_and_is_idempotent(roots):
    src, root = roots
    d = crashed_copy(src, root, STEM, frames=50)
    f = RecordingFiles(d)
    states_before = f.states.read_bytes()
    logged = rows(f.frame_log)
    assert len(logged) == 50  # every row is flushed with its frame
    assert unrepaired_recordings(root) == [d]

    res = repair_recording(root, d, by="test")
    meta = parse_recording_meta(f.meta.read_bytes())
    assert res.action == "repaired" and meta == res.meta
    probe = probe_video(f.video)
    kept = rows(f.frame_log)
    # the open fragment (<= fragment_sec = 0.25 s) is what the kill took
    assert 0 < probe.frames < 50 and len(kept) == probe.frames == meta.frames_decodable
    assert meta.status == "crashed" and meta.frames_written == len(kept)
    assert meta.frame_log_rows_removed == 50 - len(kept) == meta.frames_dropped
    assert meta.frames_captured == 50
    assert kept == logged[: len(kept)]  # the rows kept are the recorder's, unchanged
    assert rows(f.frame_log_before_repair) == logged  # the original, aside
    want_lost = float(logged[-1]["capture_ts"]) - float(kept[-1]["capture_ts"])
    assert meta.seconds_lost == pytest.approx(want_lost, abs=1e-6)
    assert meta.seconds_lost is not None and meta.seconds_lost <= 0.25 + 1 / 30 + 1e-6
    assert f.states.read_bytes() == states_before  # joint data kept as it is
    assert meta.states_rows == 51 and meta.recording_path == str(DataRoot.recording_rel(STEM))
    assert "repaired by test" in meta.status_reason
    assert f"{50 - len(kept)} {FRAME_LOG} rows beyond them cut" in meta.status_reason
    assert (meta.width, meta.height, meta.codec) == (160, 120, "h264")
    # decoded PTS are the kept rows' capture times: the rows and the frames are the same frames
    mono = np.array([int(r["capture_mono_ns"]) for r in kept])
    assert np.allclose(probe.pts_s, (mono - mono[0]) / 1e9, atol=1e-4)
    with av.open(str(f.video)) as c:  # the frames the meta promises decode from the file itself
        assert sum(1 for _ in zip(range(len(kept)), c.decode(video=0), strict=False)) == len(kept)

    snapshot = {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()}
    again = repair_recording(root, d, by="test")
    assert again.action == "already"
    assert {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()} == snapshot
    assert unrepaired_recordings(root) == []


def test_an_interrupted_repair_is_finished_from_the_original_aside(roots):
    src, root = roots
    d = crashed_copy(src, root, STEM, frames=40)
    f = RecordingFiles(d)
    first = repair_recording(root, d, by="test").meta
    f.meta.unlink()  # as if the repair died between the frame log and the meta
    second = repair_recording(root, d, by="test").meta
    assert first is not None and second is not None
    assert (second.frames_written, second.frame_log_rows_removed, second.seconds_lost) == (
        first.frames_written,
        first.frame_log_rows_removed,
        first.seconds_lost,
    )
    assert len(rows(f.frame_log_before_repair)) == 40


def test_partial_lines_and_a_missing_video(roots):
    src, root = roots
    d = crashed_copy(src, root, STEM, frames=20)
    f = RecordingFiles(d)
    with open(f.frame_log, "ab") as fh:
        fh.write(b"20,17000")  # a row cut mid-write
    with open(f.states, "ab") as fh:
        fh.write(b"1767268800.5,meas")
    meta = repair_recording(root, d, by="test").meta
    assert meta is not None
    assert f"1 partial or malformed {FRAME_LOG} line(s) dropped" in meta.status_reason
    assert f"{STATES} ends in a row cut by the kill" in meta.status_reason
    assert f.frame_log.read_bytes().endswith(b"\n")

    other = "run_0004_20260101_120000"
    d2 = crashed_copy(src, root, other, frames=5)
    RecordingFiles(d2).video.unlink()  # camera never delivered: no mp4, rows cut to none
    meta2 = repair_recording(root, d2, by="test").meta
    assert meta2 is not None and meta2.status == "crashed"
    assert (meta2.frames_written, meta2.frames_decodable, meta2.frame_log_rows_removed) == (0, 0, 5)
    assert f"{VIDEO} is missing" in meta2.status_reason
    assert rows(RecordingFiles(d2).frame_log) == []


def test_a_recording_being_written_is_refused_and_left_untouched(roots):
    _src, root = roots
    settings = make_settings(root)
    trial = TrialRecording.create(root, STEM, settings, "synthetic")  # holds the folder's lock
    try:
        trial.write_frame(_image(0), time.time(), time.monotonic_ns() + 1, False)
        assert unrepaired_recordings(root) == [trial.dir]
        with pytest.raises(RecordingBusyError, match="held by a live recorder"):
            repair_recording(root, trial.dir, by="test")
        assert not trial.files.meta.exists() and not trial.files.frame_log_before_repair.exists()
    finally:
        trial.close_states()
        trial.close_media()
        trial.release()
    assert repair_recording(root, trial.dir, by="test").action == "repaired"


def test_complete_recordings_are_left_alone(roots):
    src, root = roots
    d = crashed_copy(src, root, STEM, frames=10)
    meta = RecordingMeta.model_validate(
        {**repair_recording(root, d, by="t").meta.model_dump(), "status": "ok"}  # type: ignore[union-attr]
    )
    RecordingFiles(d).meta.write_text(meta.model_dump_json())
    before = {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()}
    res = repair_recording(root, d, by="t")
    assert res.action == "complete" and "status ok" in res.note
    assert {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()} == before
    RecordingFiles(d).meta.write_text("{not json")
    with pytest.raises(RepairError, match="is invalid"):
        repair_recording(root, d, by="t")


def test_find_recording_refuses_what_is_not_a_recording_of_the_root(roots, tmp_path):
    src, root = roots
    d = crashed_copy(src, root, STEM, frames=3)
    assert find_recording(root, STEM) == d
    assert find_recording(root, str(d)) == d
    assert find_recording(root, str(d.parent)) == d  # the run folder names its recording
    with pytest.raises(RepairError, match="outside the data root"):
        find_recording(root, str(DataRoot(src).recording(STEM).dir))
    with pytest.raises(RepairError, match="not a recording folder"):
        find_recording(root, str(root / "runs"))
    with pytest.raises(RepairError, match="no run run_0099"):
        find_recording(root, "run_0099_20260101_120000")
    with pytest.raises(RepairError, match="outside"):
        find_recording(root, "../etc")
    with pytest.raises(RepairError, match="characters outside"):
        find_recording(root, "run;rm")
    with pytest.raises(RepairError, match="is not a folder"):
        find_recording(tmp_path / "nope", STEM)
    empty = DataRoot(root).recording("run_0005_20260101_120000").dir
    empty.mkdir(parents=True)
    with pytest.raises(RepairError, match="not a recording"):
        find_recording(root, "run_0005_20260101_120000")
    link = DataRoot(root).run_folders / "run_0006_20260101_120000"
    link.symlink_to(DataRoot(src).run_dir(STEM))  # a run folder pointing out of the root
    with pytest.raises(RepairError, match="outside the data root"):
        find_recording(root, str(link))


def test_busy_folders_are_reported_not_waited_on(roots):
    src, root = roots
    d = crashed_copy(src, root, STEM, frames=5)
    with hold_dir(d), pytest.raises(RecordingBusyError):
        repair_recording(root, d, by="t")


@pytest.mark.anyio
async def test_the_recorder_repairs_what_a_killed_recorder_left_when_it_starts(
    roots, run_recorder, wait_for
):
    src, root = roots
    crashed = crashed_copy(src, root, STEM, frames=30)
    done_stem = "run_0004_20260101_120000"
    done = crashed_copy(src, root, done_stem, frames=5)
    repair_recording(root, done, by="earlier")
    done_before = {p.name: p.read_bytes() for p in done.iterdir() if p.is_file()}
    new = "run_0005_20260101_120000"
    with capture_logs() as logs:
        async with run_recorder(make_settings(root)) as svc:
            sender = RecorderSender(port=svc.port)
            sender.notify(TrialStart(run_stem=new))  # this run's own trial: never a candidate
            await wait_for(lambda: svc.trial is not None, what="trial open")
            await wait_for(svc.repair_scan.done.is_set, what="start-up repair")
            assert svc.repair_scan.folders == [crashed]
            assert not DataRoot(root).recording(new).meta.exists()
            sender.notify(TrialEnd(run_stem=new))
            await wait_for(lambda: DataRoot(root).recording(new).meta.exists(), what="new meta")
    meta = parse_recording_meta(RecordingFiles(crashed).meta.read_bytes())
    assert meta.status == "crashed" and "repaired by recorder start-up" in meta.status_reason
    assert len(rows(RecordingFiles(crashed).frame_log)) == meta.frames_decodable
    assert parse_recording_meta(DataRoot(root).recording(new).meta.read_bytes()).status == "ok"
    assert {p.name: p.read_bytes() for p in done.iterdir() if p.is_file()} == done_before
    events = [e for e in logs if e["event"] == "recording_repaired"]
    assert [e["run_stem"] for e in events] == [STEM]
    started = next(e for e in logs if e["event"] == "recorder_started")
    assert started["unrepaired"] == 1


def test_mecharm_recording_repair_cli(roots, capsys):
    src, root = roots
    a = crashed_copy(src, root, STEM, frames=20)
    other = "run_0004_20260101_120000"
    crashed_copy(src, root, other, frames=12)

    def run(*args: str) -> tuple[int, str, str]:
        code = mecharm_main(["recording", "repair", "--root", str(root), *args])
        out = capsys.readouterr()
        return code, out.out, out.err

    code, out, err = run(STEM)
    assert code == 0 and out.startswith(f"repaired {DataRoot.recording_rel(STEM)}: status crashed")
    assert "s lost" in out and not err
    code, out, _ = run(str(a))
    assert code == 0 and out.startswith("already repaired")
    code, out, _ = run("--all")
    assert code == 0 and out.count("repaired") == 1 and other in out
    code, out, _ = run("--all")
    assert code == 0 and out.startswith("nothing to repair")
    # refusals: exit 2, one line naming the problem, no traceback
    for args, says in [
        ((), "name RUN_STEM_OR_PATH"),
        (("--all", STEM), "not both"),
        ((str(DataRoot(src).recording(STEM).dir),), "outside the data root"),
        ((str(root / "runs"),), "not a recording folder"),
        (("run_0042_20260101_120000",), "no run run_0042"),
    ]:
        code, out, err = run(*args)
        assert code == 2 and says in err and "Traceback" not in err, (args, err)
    code = mecharm_main(["recording", "repair", "--root", str(root / "nope"), "--all"])
    assert code == 2 and "is not a folder" in capsys.readouterr().err
    # busy: reported, exit 1, folder untouched
    busy = crashed_copy(src, root, "run_0005_20260101_120000", frames=5)
    with hold_dir(busy):
        code, _out, err = run("--all")
    assert code == 1 and "NOT REPAIRED" in err and "held by a live recorder" in err
    assert not RecordingFiles(busy).meta.exists()


def test_a_kill_at_any_byte_leaves_an_mp4_the_repair_can_read(tmp_path):
    """The file a kill leaves can end anywhere, also inside a fragment header, which FFmpeg
    refuses to open at all; the repair cuts that header and every frame before it decodes."""
    full = tmp_path / "full.mp4"
    w = VideoWriter(full, VideoSettings(preset="ultrafast", fragment_sec=0.25))
    for i in range(60):
        assert w.write(_image(i * 7), 1_000_000_000 + i * 40_000_000)
    w.close()
    data = full.read_bytes()
    cut = tmp_path / "cut.mp4"
    counts = []
    for end in range(800, len(data), max(1, len(data) // 150)):
        cut.write_bytes(data[:end])
        removed = cut_partial_header(cut)
        probe = probe_video(cut)
        assert "cannot be opened" not in probe.problem, (end, probe.problem)
        assert cut.stat().st_size == end - removed
        counts.append(probe.frames)
    assert counts == sorted(counts) and counts[-1] >= 60 - 8  # only the open fragment is lost
    assert cut_partial_header(full) == 0  # a whole file is never touched


def _tree(path: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()
    }


@pytest.mark.anyio
async def test_a_run_folder_symlinked_out_of_the_root_is_never_written_through(
    roots, tmp_path, capsys, run_recorder, wait_for
):
    """A crashed recording whose run folder is a symlink to a folder outside the root: repair
    by name, `--all` and the recorder's start-up scan each refuse it, naming it; 0 bytes are
    written outside (docs/data-root.md, "Nothing outside the root")."""
    src, root = roots
    outside = tmp_path / "outside"
    crashed_copy(src, outside, STEM, frames=10)
    link = DataRoot(root).run_dir(STEM)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(DataRoot(outside).run_dir(STEM))
    before = _tree(outside)
    code = mecharm_main(["recording", "repair", "--root", str(root), STEM])
    err = capsys.readouterr().err
    assert code in (1, 2) and "outside the data root" in err and "Traceback" not in err, err
    code = mecharm_main(["recording", "repair", "--root", str(root), "--all"])
    err = capsys.readouterr().err
    assert code in (1, 2) and "outside the data root" in err, err
    async with run_recorder(make_settings(root)) as svc:
        await wait_for(svc.repair_scan.done.is_set, what="start-up repair")
        assert [str(p) for p, _why in svc.repair_scan.failed] == [str(link / "recording")]
        assert "outside the data root" in svc.repair_scan.failed[0][1]
    assert _tree(outside) == before
