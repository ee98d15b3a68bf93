"""End-to-end export of simulated recorded trials: counts, values, images, incremental, refusals."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow.parquet as pq
import pytest

from mecharm.common.layout import FRAME_LOG, META, STATES, VIDEO
from mecharm.recorder.repair import repair_recording
from mecharm.tools.export import writer as writer_mod
from mecharm.tools.export.config import ExportSettings
from mecharm.tools.export.lerobot import DatasetError, export_lerobot
from mecharm.tools.export.recording import RecordingError
from mecharm.tools.export.verify import verify_dataset

FPS = 10
SETTINGS = ExportSettings(progress=False)


def _expected_rows(trial: Any, fps: int = FPS) -> int:
    return int(np.floor((trial.frame_ts[-1] - trial.frame_ts[0]) * fps + 1e-9)) + 1


def _expected_state_action(trial: Any, t: float) -> tuple[list[float], list[float]]:
    """Independent, loop-by-loop reading of the documented definitions (docs/lerobot.md)."""
    meas = trial.measured
    before = [m for m in meas if m[0] <= t]
    after = [m for m in meas if m[0] > t]
    if not before:
        joints = meas[0][1]
    elif not after or after[0][0] - before[-1][0] > 0.25:
        joints = before[-1][1]
    else:
        (ta, a), (tb, b) = before[-1], after[0]
        joints = [a[j] + (t - ta) / (tb - ta) * (b[j] - a[j]) for j in range(6)]
    cmds = [c for c in trial.commanded if c[0] <= t]
    target = cmds[-1][1] if cmds else joints
    g_cmd = [v for ts, v in trial.gripper if ts <= t] or [trial.gripper[0][1]]
    g_obs = [v for ts, v in trial.gripper if ts + 2.0 <= t] or [trial.gripper[0][1]]
    return [*joints, g_obs[-1]], [*target, g_cmd[-1]]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): _sha(p) for p in sorted(root.rglob("*")) if p.is_file()}


def test_export_counts_values_images_and_verify(recs: Any, data_root: Path, tmp_path: Path) -> None:
    trials = [recs.write(data_root, recs.stem(i), seed=i, duration=5.0 + i) for i in range(2)]
    for t in trials:
        recs.ledger(data_root, t)
    out = tmp_path / "ds"
    rep = export_lerobot(data_root, out, SETTINGS)
    assert [e.run_stem for e in rep.exported] == [t.run_stem for t in trials]
    assert [e.length for e in rep.exported] == [_expected_rows(t) for t in trials]
    assert not rep.refused and not rep.skipped

    info = json.loads((out / "meta/info.json").read_text())
    assert info["total_episodes"] == 2 and info["total_frames"] == sum(
        _expected_rows(t) for t in trials
    )
    assert (
        info["fps"] == FPS
        and info["features"]["observation.images.side"]["info"]["video.codec"] == "h264"
    )
    data = pq.read_table(out / "data/chunk-000/file-000.parquet").to_pylist()
    assert [r["index"] for r in data] == list(range(len(data)))
    for ep, trial in enumerate(trials):
        rows = [r for r in data if r["episode_index"] == ep]
        assert len(rows) == _expected_rows(trial)
        for r in rows:
            t = trial.frame_ts[0] + r["frame_index"] / FPS
            assert r["timestamp"] == np.float32(r["frame_index"] / FPS)
            state, action = _expected_state_action(trial, t)
            np.testing.assert_allclose(r["observation.state"], state, atol=2e-3)
            np.testing.assert_allclose(r["action"], action, atol=1e-4)

    # every row's image is the recorded frame nearest in capture time, at pts == timestamp exactly
    episodes = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    with av.open(str(out / "videos/observation.images.side/chunk-000/file-000.mp4")) as c:
        decoded = [
            (f.pts * f.time_base, recs.read_stamp(f.to_ndarray(format="rgb24")))
            for f in c.decode(video=0)
        ]
    assert len(decoded) == info["total_frames"]
    for ep, trial in zip(episodes, trials, strict=True):
        start = ep["videos/observation.images.side/from_timestamp"]
        for k in range(ep["length"]):
            n = round(start * FPS) + k
            pts, shown = decoded[n]
            assert pts == pytest.approx(n / FPS, abs=1e-12)  # exact rational, no drift
            t = trial.frame_ts[0] + k / FPS
            nearest = int(np.argmin(np.abs(trial.frame_ts - t)))
            assert shown == nearest, (ep["episode_index"], k)
    rep_v = verify_dataset(out)
    assert rep_v.ok, rep_v.errors
    assert rep_v.episodes == 2 and rep_v.frames == info["total_frames"]


def test_selection_skips_with_reasons(recs: Any, data_root: Path, tmp_path: Path) -> None:
    good = recs.write(data_root, recs.stem(1), seed=1, duration=3.0)
    recs.ledger(data_root, good)
    recs.ledger(data_root, recs.write(data_root, recs.stem(2), seed=2, duration=3.0), place="no")
    recs.ledger(data_root, recs.stem(3), rec_status="none")  # no recording at all
    rep = export_lerobot(data_root, tmp_path / "ds", SETTINGS)
    assert [e.run_stem for e in rep.exported] == [good.run_stem]
    reasons = {s.run_stem: s.reason for s in rep.skipped}
    assert reasons[recs.stem(2)] == "not selected: place_verdict is no (want yes)"
    assert reasons[recs.stem(3)].startswith("not selected: recording_status is none")
    # --select widens the choice; the trial without recording is then refused, not half-exported
    rep2 = export_lerobot(
        data_root, tmp_path / "ds2", SETTINGS.model_copy(update={"select": "all"})
    )
    assert [e.run_stem for e in rep2.exported] == [good.run_stem, recs.stem(2)]
    assert [s.run_stem for s in rep2.refused] == [recs.stem(3)]
    assert "does not exist" in rep2.refused[0].reason or "missing" in rep2.refused[0].reason


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"write_meta": False}, f"{META} is missing: the recording ended abnormally"),
        ({"drop_log_rows": 3}, f"frames but {META} says frames_written"),
        ({"frame_log_extra": True}, f"frames but {META} says frames_written"),
        ({"status": "truncated"}, "ledger says recording_status=ok but the meta says truncated"),
    ],
)
def test_broken_recordings_are_refused(
    recs: Any, data_root: Path, tmp_path: Path, kwargs: dict[str, object], needle: str
) -> None:
    good = recs.write(data_root, recs.stem(1), seed=1, duration=2.5)
    bad = recs.write(data_root, recs.stem(2), seed=2, duration=2.5, **kwargs)  # type: ignore[arg-type]
    recs.ledger(data_root, good)
    recs.ledger(data_root, bad)
    rep = export_lerobot(data_root, tmp_path / "ds", SETTINGS)
    assert [e.run_stem for e in rep.exported] == [good.run_stem]
    assert len(rep.refused) == 1 and rep.refused[0].run_stem == bad.run_stem
    assert needle in rep.refused[0].reason
    assert verify_dataset(tmp_path / "ds").ok


def test_video_with_fewer_frames_than_log_is_refused(
    recs: Any, data_root: Path, tmp_path: Path
) -> None:
    bad = recs.write(data_root, recs.stem(1), seed=1, duration=2.5)
    # the meta and the frame log agree, but the video lost frames (e.g. a killed writer)
    log = (bad.path / FRAME_LOG).read_text().splitlines()
    extra = [f"{len(log) - 1 + i},{bad.frame_ts[-1] + 0.04 * (i + 1):.6f},0" for i in range(5)]
    (bad.path / FRAME_LOG).write_text("\n".join(log + extra) + "\n")
    meta = json.loads((bad.path / META).read_text())
    meta["frames_written"] += 5
    (bad.path / META).write_text(json.dumps(meta))
    recs.ledger(data_root, bad)
    rep = export_lerobot(data_root, tmp_path / "ds", SETTINGS)
    assert not rep.exported and f"{VIDEO} holds" in rep.refused[0].reason
    assert not (tmp_path / "ds").exists()  # nothing to export: nothing written


def test_rows_out_of_time_order_are_refused_not_resorted(
    recs: Any, data_root: Path, tmp_path: Path
) -> None:
    """The action is what was sent, in the order it was sent: a states.csv whose joint rows go
    back in time is refused (naming the line), never silently re-sorted into another action."""
    a = recs.write(data_root, recs.stem(1), seed=1, duration=2.5)
    lines = (a.path / STATES).read_text().splitlines()
    i = next(k for k, line in enumerate(lines) if ",commanded," in line)
    j = next(k for k in range(i + 1, len(lines)) if ",measured," in lines[k])
    lines[i], lines[j] = lines[j], lines[i]  # a reading before the send that it followed
    (a.path / STATES).write_text("\n".join(lines) + "\n")
    recs.ledger(data_root, a)
    rep = export_lerobot(data_root, tmp_path / "ds", SETTINGS)
    (refused,) = rep.refused
    assert "goes back in time" in refused.reason and f"{STATES} line {j + 1}" in refused.reason


def test_no_measured_rows_and_bad_states_are_refused(
    recs: Any, data_root: Path, tmp_path: Path
) -> None:
    a = recs.write(data_root, recs.stem(1), seed=1, duration=2.5)
    lines = (a.path / STATES).read_text().splitlines()
    (a.path / STATES).write_text(
        "\n".join(line for line in lines if ",measured," not in line) + "\n"
    )
    b = recs.write(data_root, recs.stem(2), seed=2, duration=2.5)
    lines = (b.path / STATES).read_text().splitlines()
    lines = [line.replace(",gripper,,,,,,,,,100,", ",gripper,,,,,,,,,half,") for line in lines]
    (b.path / STATES).write_text("\n".join(lines) + "\n")
    recs.ledger(data_root, a)
    recs.ledger(data_root, b)
    rep = export_lerobot(data_root, tmp_path / "ds", SETTINGS)
    reasons = {s.run_stem: s.reason for s in rep.refused}
    assert "no measured joint rows" in reasons[a.run_stem]
    assert "gripper_state 'half' is not the gripper value sent" in reasons[b.run_stem]
    assert f"{STATES} line" in reasons[b.run_stem]


def test_damaged_csv_bytes_refuse_only_that_trial(
    recs: Any, data_root: Path, tmp_path: Path
) -> None:
    """A byte that is not UTF-8, or a cell past the csv module's field limit, in states.csv or
    frame_log.csv refuses that one trial naming the file and line; the others still export."""
    good = recs.write(data_root, recs.stem(1), seed=1, duration=2.5)
    damaged = {
        recs.stem(2): (STATES, b"\xff\xfe", f"{STATES} line 4: byte 0xff is not UTF-8 text"),
        recs.stem(3): (STATES, b"7" * 200_000 + b",", f"{STATES} line 4: not readable as csv"),
        recs.stem(4): (FRAME_LOG, b"\xc3", f"{FRAME_LOG} line 4: byte 0xc3 is not UTF-8 text"),
        recs.stem(5): (FRAME_LOG, b'"' + b"1" * 200_000, f"{FRAME_LOG} line 4: not readable"),
    }
    recs.ledger(data_root, good)
    for n, (stem, (name, junk, _)) in enumerate(damaged.items(), 2):
        t = recs.write(data_root, stem, seed=n, duration=2.5)
        lines = (t.path / name).read_bytes().split(b"\n")
        lines[3] = junk + lines[3]  # line 4
        (t.path / name).write_bytes(b"\n".join(lines))
        recs.ledger(data_root, t)
    rep = export_lerobot(data_root, tmp_path / "ds", SETTINGS)
    assert [e.run_stem for e in rep.exported] == [good.run_stem]
    reasons = {s.run_stem: s.reason for s in rep.refused}
    assert sorted(reasons) == sorted(damaged)
    for stem, (_, _, needle) in damaged.items():
        assert needle in reasons[stem], reasons[stem]
    assert verify_dataset(tmp_path / "ds").ok


def test_incremental_append_and_idempotent(recs: Any, data_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    first = recs.write(data_root, recs.stem(1), seed=1, duration=3.0)
    recs.ledger(data_root, first)
    export_lerobot(data_root, out, SETTINGS)
    before = _tree(out)

    rep = export_lerobot(data_root, out, SETTINGS)  # nothing new: nothing touched
    assert not rep.exported and [s.reason for s in rep.already] == ["already exported as episode 0"]
    assert _tree(out) == before

    second = recs.write(data_root, recs.stem(2), seed=2, duration=4.0)
    recs.ledger(data_root, second)
    rep = export_lerobot(data_root, out, SETTINGS)
    assert [(e.episode_index, e.run_stem) for e in rep.exported] == [(1, second.run_stem)]
    after = _tree(out)
    for rel in ("data/chunk-000/file-000.parquet", "videos/observation.images.side/chunk-000/file-000.mp4",
                "meta/episodes/chunk-000/file-000.parquet"):  # fmt: skip
        assert after[rel] == before[rel]  # the first episode's files are never rewritten
    assert "data/chunk-000/file-001.parquet" in after
    assert "videos/observation.images.side/chunk-000/file-001.mp4" in after
    eps = pq.read_table(out / "meta/episodes/chunk-000/file-001.parquet").to_pylist()
    assert eps[0]["episode_index"] == 1 and eps[0]["dataset_from_index"] == _expected_rows(first)
    assert eps[0]["videos/observation.images.side/from_timestamp"] == 0.0
    info = json.loads((out / "meta/info.json").read_text())
    assert info["total_episodes"] == 2 and info["splits"] == {"train": "0:2"}
    stats = json.loads((out / "meta/stats.json").read_text())
    assert stats["index"]["count"] == [info["total_frames"]]
    assert stats["index"]["max"] == [info["total_frames"] - 1]
    manifest = json.loads((out / "meta/mecharm_export.json").read_text())
    assert [e["run_stem"] for e in manifest["episodes"]] == [first.run_stem, second.run_stem]
    assert verify_dataset(out).ok


def test_interrupted_run_leftovers_are_cleaned(recs: Any, data_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    recs.ledger(data_root, recs.write(data_root, recs.stem(1), seed=1, duration=2.5))
    export_lerobot(data_root, out, SETTINGS)
    # a crash after moving a new data file in but before the manifest (the commit point)
    orphan = out / "data/chunk-000/file-001.parquet"
    orphan.write_bytes(b"partial")
    (out / ".staging-deadbeef").mkdir()
    v = verify_dataset(out, check_video=False)
    assert any("no episode refers to this file" in e for e in v.errors)
    rep = export_lerobot(data_root, out, SETTINGS)
    assert "data/chunk-000/file-001.parquet" in rep.recovered
    assert not orphan.exists() and not (out / ".staging-deadbeef").exists()
    assert verify_dataset(out).ok


def test_refuses_foreign_folder_and_other_fps(recs: Any, data_root: Path, tmp_path: Path) -> None:
    recs.ledger(data_root, recs.write(data_root, recs.stem(1), seed=1, duration=2.5))
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(DatasetError, match="not a dataset made by"):
        export_lerobot(data_root, foreign, SETTINGS)
    out = tmp_path / "ds"
    export_lerobot(data_root, out, SETTINGS)
    with pytest.raises(DatasetError, match="10 fps dataset; cannot add episodes at --fps 15"):
        export_lerobot(data_root, out, SETTINGS.model_copy(update={"fps": 15}))


def test_decode_failure_aborts_without_commit(
    recs: Any, data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "ds"
    recs.ledger(data_root, recs.write(data_root, recs.stem(1), seed=1, duration=2.5))
    export_lerobot(data_root, out, SETTINGS)
    before = _tree(out)
    for i in (2, 3):
        recs.ledger(data_root, recs.write(data_root, recs.stem(i), seed=i, duration=2.5))
    real = writer_mod.decode_selected

    def failing(path: Path, wanted: Any, expected: int, **kw: Any) -> Any:
        # the disk fails while the second new trial is being read, after frames were encoded
        for n, item in enumerate(real(path, wanted, expected, **kw)):
            if recs.stem(3) in str(path) and n == 10:
                raise RecordingError(f"{path.name} cannot be decoded: I/O error")
            yield item

    monkeypatch.setattr(writer_mod, "decode_selected", failing)
    with pytest.raises(RecordingError, match="I/O error"):
        export_lerobot(data_root, out, SETTINGS)
    assert _tree(out) == before  # the first new trial was encoded in staging, never committed
    assert not list(out.glob(".staging-*"))
    monkeypatch.setattr(writer_mod, "decode_selected", real)
    rep = export_lerobot(data_root, out, SETTINGS)
    assert [e.episode_index for e in rep.exported] == [1, 2]
    assert verify_dataset(out).ok


def test_dry_run_writes_nothing(recs: Any, data_root: Path, tmp_path: Path) -> None:
    recs.ledger(data_root, recs.write(data_root, recs.stem(1), seed=1, duration=2.5))
    rep = export_lerobot(data_root, tmp_path / "ds", SETTINGS, dry_run=True)
    assert [e.run_stem for e in rep.exported] == [recs.stem(1)]
    assert not (tmp_path / "ds").exists()
    assert os.listdir(tmp_path) == ["data"]


def test_one_export_at_a_time(recs: Any, data_root: Path, tmp_path: Path) -> None:
    import fcntl

    recs.ledger(data_root, recs.write(data_root, recs.stem(1), seed=1, duration=2.0))
    out = tmp_path / "ds"
    with open(tmp_path / ".ds.lock", "a+") as fh:  # another process holds the dataset
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        with pytest.raises(DatasetError, match=r"another export into .* is running"):
            export_lerobot(data_root, out, SETTINGS)
    assert not out.exists()
    assert [e.episode_index for e in export_lerobot(data_root, out, SETTINGS).exported] == [0]
    (tmp_path / "file").write_text("x")
    with pytest.raises(DatasetError, match="is not a folder"):
        export_lerobot(data_root, tmp_path / "file", SETTINGS)


def test_corrupt_dataset_meta_is_a_clear_error(recs: Any, data_root: Path, tmp_path: Path) -> None:
    recs.ledger(data_root, recs.write(data_root, recs.stem(1), seed=1, duration=2.0))
    out = tmp_path / "ds"
    export_lerobot(data_root, out, SETTINGS)
    (out / "meta/episodes/chunk-000/file-000.parquet").write_bytes(b"PAR1 broken")
    with pytest.raises(DatasetError, match="is unreadable"):
        export_lerobot(data_root, out, SETTINGS)


def test_late_meta_with_ledger_status_none_is_exportable_when_selected(
    recs: Any, data_root: Path, tmp_path: Path
) -> None:
    # the runtime waited 2 s for the meta, wrote "none", and the recorder finished later
    recs.ledger(
        data_root, recs.write(data_root, recs.stem(1), seed=1, duration=2.0), rec_status="none"
    )
    assert not export_lerobot(data_root, tmp_path / "a", SETTINGS).exported  # default: needs ok
    rep = export_lerobot(
        data_root,
        tmp_path / "b",
        SETTINGS.model_copy(update={"select": "recording_status=ok|none"}),
    )
    assert [e.run_stem for e in rep.exported] == [recs.stem(1)] and not rep.refused


def _killed(recs: Any, root: Path, i: int, keep: float = 0.6) -> Any:
    """A recording as a SIGKILL leaves it: no meta, the mp4 cut mid-fragment, every row logged."""
    trial = recs.write(root, recs.stem(i), seed=i, duration=4.0, write_meta=False)
    video = trial.path / VIDEO
    data = video.read_bytes()
    video.write_bytes(data[: int(len(data) * keep)])
    return trial


def test_crashed_recordings_are_exported_with_include_crashed_only(
    recs: Any, data_root: Path, tmp_path: Path
) -> None:
    """docs/lerobot.md, "Crashed recordings": the rows the decodable frames cover, and only
    with the flag; the runtime's ``crashed`` and an old ``none`` row both find the repaired meta."""
    crashed = _killed(recs, data_root, 1)
    recs.ledger(data_root, crashed, rec_status="crashed")
    old_row = _killed(recs, data_root, 2, keep=0.8)
    recs.ledger(data_root, old_row, rec_status="none")  # a ledger row from before the linking
    whole = recs.write(data_root, recs.stem(3), seed=3, duration=2.0)
    recs.ledger(data_root, whole)
    flag = SETTINGS.model_copy(update={"include_crashed": True})

    rep = export_lerobot(data_root, tmp_path / "dry", flag, dry_run=True)
    refused = {s.run_stem: s.reason for s in rep.refused}
    assert f"recording repair {crashed.run_stem}" in refused[crashed.run_stem]

    for t in (crashed, old_row):
        meta = repair_recording(data_root, t.path, by="test").meta
        assert meta is not None and 2 <= meta.frames_written < len(t.frame_ts)
    rep = export_lerobot(data_root, tmp_path / "default", SETTINGS)
    assert [e.run_stem for e in rep.exported] == [whole.run_stem]
    skipped = {s.run_stem: s.reason for s in rep.skipped}
    assert "recording_status is crashed (want ok)" in skipped[crashed.run_stem]
    assert "recording_status is none" in skipped[old_row.run_stem]
    # selected by hand, a crashed recording is refused without the flag, with the reason
    rep = export_lerobot(
        data_root,
        tmp_path / "hand",
        SETTINGS.model_copy(update={"select": "recording_status=crashed"}),
    )
    assert not rep.exported and "--include-crashed" in rep.refused[0].reason

    out = tmp_path / "ds"
    rep = export_lerobot(data_root, out, flag)
    assert [e.run_stem for e in rep.exported] == [t.run_stem for t in (crashed, old_row, whole)]
    assert not rep.refused
    assert "crashed recording" in rep.exported[0].note and not rep.exported[2].note
    episodes = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    with av.open(str(out / "videos/observation.images.side/chunk-000/file-000.mp4")) as c:
        shown = [recs.read_stamp(f.to_ndarray(format="rgb24")) for f in c.decode(video=0)]
    for ep, t in zip(episodes[:2], (crashed, old_row), strict=True):
        kept = (
            len((t.path / FRAME_LOG).read_text().splitlines()) - 1
        )  # the frame log the repair cut to the decodable frames
        covered = t.frame_ts[:kept]
        assert ep["length"] == _expected_rows(type("T", (), {"frame_ts": covered})())
        start = round(ep["videos/observation.images.side/from_timestamp"] * FPS)
        for k in range(ep["length"]):  # each row shows the nearest decodable recorded frame
            nearest = int(np.argmin(np.abs(covered - (covered[0] + k / FPS))))
            assert shown[start + k] == nearest
    manifest = json.loads((out / "meta/mecharm_export.json").read_text())
    assert [e["recording_status"] for e in manifest["episodes"]] == ["crashed", "crashed", "ok"]
    rep_v = verify_dataset(out)
    assert rep_v.ok, rep_v.errors
