"""The top camera as ``observation.images.top``: alignment, size, refusals, side-only datasets.

The fixtures write the runtime's top recording as it is on disk (MJPEG packets in
Matroska, a frame log on the side camera's wall clock); every top frame carries its
frame number, so a test reads back which recorded frame a dataset row shows and
compares it with the frame nearest the row's time, computed here on its own.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow.parquet as pq
import pytest

from mecharm.cameras.jpeg import jpeg_size
from mecharm.common.layout import TOP_FRAME_LOG, TOP_VIDEO, VIDEO, DataRoot
from mecharm.tools.cli import main
from mecharm.tools.export import layout as L
from mecharm.tools.export.config import ExportSettings
from mecharm.tools.export.lerobot import DatasetError, export_lerobot
from mecharm.tools.export.verify import verify_dataset
from mecharm.tools.export.video import jpeg_lowres

FPS = 10
TOP_DIR = "videos/observation.images.top/chunk-000"
SIDE_DIR = "videos/observation.images.side/chunk-000"


def _settings(**kw: Any) -> ExportSettings:
    return ExportSettings(progress=False, **kw)


def _decode(recs: Any, path: Path, block: float) -> list[tuple[float, int, tuple[int, int]]]:
    """(presentation time, stamped frame number, (width, height)) of every frame."""
    with av.open(str(path)) as c:
        return [
            (
                float(f.pts * f.time_base),
                recs.read_stamp(f.to_ndarray(format="rgb24"), block),
                (f.width, f.height),
            )
            for f in c.decode(video=0)
        ]


def _nearest(ts: np.ndarray, t: float) -> int:
    """The frame nearest ``t``, ties to the earlier one (loop-by-loop, not the exporter's code)."""
    best = 0
    for i, x in enumerate(ts):
        if abs(x - t) < abs(ts[best] - t):
            best = i
    return best


def test_top_rows_show_the_top_frame_nearest_each_row(
    recs: Any, data_root: Path, tmp_path: Path
) -> None:
    trials = [recs.write(data_root, recs.stem(i), seed=i, duration=4.0 + i) for i in range(2)]
    for t in trials:
        recs.ledger(data_root, t)
    out = tmp_path / "ds"
    rep = export_lerobot(data_root, out, _settings())
    assert [e.run_stem for e in rep.exported] == [t.run_stem for t in trials] and not rep.refused
    info = json.loads((out / L.INFO_PATH).read_text())
    feats = info["features"]
    assert list(feats)[:4] == ["observation.state", "action", L.VIDEO_KEY, L.TOP_VIDEO_KEY]
    assert feats[L.TOP_VIDEO_KEY]["shape"] == [180, 320, 3]  # 320 < top_width 640: as recorded
    assert feats[L.TOP_VIDEO_KEY]["info"]["video.width"] == 320
    assert feats[L.TOP_VIDEO_KEY]["info"]["video.fps"] == FPS
    assert feats[L.VIDEO_KEY]["shape"] == [96, 192, 3]
    episodes = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    side = _decode(recs, out / SIDE_DIR / "file-000.mp4", 16)
    top = _decode(recs, out / TOP_DIR / "file-000.mp4", 16)
    assert len(top) == len(side) == info["total_frames"]
    assert {size for _, _, size in top} == {(320, 180)}
    for ep, trial in zip(episodes, trials, strict=True):
        assert ep[f"videos/{L.TOP_VIDEO_KEY}/chunk_index"] == 0
        start = ep[f"videos/{L.TOP_VIDEO_KEY}/from_timestamp"]
        assert start == ep[f"videos/{L.VIDEO_KEY}/from_timestamp"]
        assert ep[f"videos/{L.TOP_VIDEO_KEY}/to_timestamp"] == start + ep["length"] / FPS
        for k in range(ep["length"]):
            n = round(start * FPS) + k
            pts, shown, _ = top[n]
            assert pts == pytest.approx(n / FPS, abs=1e-12)
            t_k = trial.frame_ts[0] + k / FPS
            assert shown == _nearest(trial.top_ts, t_k), (ep["episode_index"], k)
            assert side[n][1] == _nearest(trial.frame_ts, t_k), (ep["episode_index"], k)
        mean = np.asarray(ep[f"stats/{L.TOP_VIDEO_KEY}/mean"])
        assert mean.shape == (3, 1, 1) and mean.min() > 0.0 and mean.max() < 1.0
        assert ep[f"stats/{L.TOP_VIDEO_KEY}/count"] == [ep["length"]]
    stats = json.loads((out / L.STATS_PATH).read_text())
    assert np.asarray(stats[L.TOP_VIDEO_KEY]["std"]).shape == (3, 1, 1)
    manifest = json.loads((out / L.MANIFEST_PATH).read_text())
    assert manifest["cameras"] == ["side", "top"]
    assert manifest["top_video"]["width"] == 320 and manifest["top_video"]["height"] == 180
    for entry, trial in zip(manifest["episodes"], trials, strict=True):
        assert entry["top_source_frames"] == len(trial.top_ts)
        assert 0 < entry["top_max_frame_offset_s"] <= 0.08  # ~10 fps with 20 % jitter
    sources = manifest["episodes"][0]["sources_sha256"]
    assert {TOP_VIDEO, TOP_FRAME_LOG, VIDEO} <= set(sources)


@pytest.mark.parametrize(("top_width", "size"), [(160, (160, 90)), (80, (80, 44))])
def test_top_width_scales_the_top_video_only(
    recs: Any, data_root: Path, tmp_path: Path, top_width: int, size: tuple[int, int]
) -> None:
    """160: scaled from the full decode; 80: a quarter of 320, decoded at 1/4 (lowres)."""
    assert jpeg_lowres(320, top_width) == (2 if top_width == 80 else 0)
    trial = recs.write(data_root, recs.stem(1), seed=1, duration=3.0)
    recs.ledger(data_root, trial)
    out = tmp_path / "ds"
    rep = export_lerobot(data_root, out, _settings(top_width=top_width))
    assert len(rep.exported) == 1, rep.refused
    info = json.loads((out / L.INFO_PATH).read_text())
    assert info["features"][L.TOP_VIDEO_KEY]["shape"] == [size[1], size[0], 3]
    assert info["features"][L.VIDEO_KEY]["shape"] == [96, 192, 3]
    top = _decode(recs, out / TOP_DIR / "file-000.mp4", 16 * top_width / 320)
    assert {s for _, _, s in top} == {size}
    for k, (_, shown, _) in enumerate(top):
        assert shown == _nearest(trial.top_ts, trial.frame_ts[0] + k / FPS), k
    # a later run at another top_width cannot join this dataset
    recs.ledger(data_root, recs.write(data_root, recs.stem(2), seed=2, duration=3.0))
    with pytest.raises(DatasetError, match=rf"top_width {top_width} .*--top-width {top_width}"):
        export_lerobot(data_root, out, _settings())


def test_side_and_top_width_give_both_cameras_one_shape(
    recs: Any, data_root: Path, tmp_path: Path
) -> None:
    """--side-width scales the side video as --top-width the top's: 192x96 and 320x180
    become 160x80 and 160x90; the side frames are still the recorded ones, in order (their
    stamps read back at the scaled block size), and the dataset verifies."""
    trial = recs.write(data_root, recs.stem(1), seed=1, duration=3.0)
    recs.ledger(data_root, trial)
    out = tmp_path / "ds"
    rep = export_lerobot(data_root, out, _settings(side_width=160, top_width=160))
    assert len(rep.exported) == 1, rep.refused
    feats = json.loads((out / L.INFO_PATH).read_text())["features"]
    assert feats[L.VIDEO_KEY]["shape"] == [80, 160, 3]
    assert feats[L.TOP_VIDEO_KEY]["shape"] == [90, 160, 3]
    side = _decode(recs, out / SIDE_DIR / "file-000.mp4", 16 * 160 / 192)
    assert {s for _, _, s in side} == {(160, 80)}
    shown = [n for _, n, _ in side]
    assert shown == sorted(shown) and len(set(shown)) > 1
    assert verify_dataset(out).ok
    manifest = json.loads((out / L.MANIFEST_PATH).read_text())
    assert manifest["video"]["side_width"] == 160
    # a later run at another side_width cannot join this dataset
    recs.ledger(data_root, recs.write(data_root, recs.stem(2), seed=2, duration=3.0))
    with pytest.raises(DatasetError, match=r"side_width 160 .*--side-width 160"):
        export_lerobot(data_root, out, _settings(top_width=160))
    # ... and at the same one it does, also through the command line
    argv = ["export", "lerobot", "--root", str(data_root), "--out", str(out), "--no-progress",
            "--side-width", "160", "--top-width", "160"]  # fmt: skip
    assert main(argv) == 0
    assert verify_dataset(out).ok


def test_jpeg_lowres_only_where_the_reduced_size_covers_the_width() -> None:
    assert jpeg_lowres(1920, 640) == 0  # 1/2 would do, but FFmpeg's 1/2 is slower
    assert jpeg_lowres(1920, 480) == 2
    assert jpeg_lowres(1920, 240) == 3
    assert jpeg_lowres(1920, 481) == 0
    assert jpeg_lowres(0, 640) == 0


def test_the_top_video_keeps_colours(recs: Any, data_root: Path, tmp_path: Path) -> None:
    """The JPEG's full-range colour becomes the video's limited range (one conversion): the
    stamped gradient comes back at its levels, not stretched or squeezed by 16..235."""
    trial = recs.write(data_root, recs.stem(1), seed=1, duration=2.0)
    recs.ledger(data_root, trial)
    out = tmp_path / "ds"
    export_lerobot(data_root, out, _settings())
    with av.open(str(out / TOP_DIR / "file-000.mp4")) as c:
        for k, frame in enumerate(c.decode(video=0)):
            rgb = frame.to_ndarray(format="rgb24").astype(float)
            shown = recs.read_stamp(rgb)
            want = recs.stamp(shown, 320, 180)[40:170, :, ::-1].astype(float)  # BGR -> RGB
            # per column and channel; H.264 at crf 30 stays within a few levels, a range
            # mix-up is off by 14-21 levels at the ends of the gradient
            err = np.abs(rgb[40:170].mean(axis=0) - want.mean(axis=0))
            assert np.percentile(err, 95) <= 8.0 and err.mean() <= 3.0, (k, err.max())


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("no_mkv", r"no top camera recording: top_camera\.mkv missing in the run folder"),
        ("no_log", r"top_frame_log\.csv missing"),
        ("short_log", r"top_camera\.mkv holds (\d+) frames but top_frame_log\.csv lists"),
        ("gap", r"from the nearest top camera frame \(limit 0\.5 s\)"),
        ("resized", r"frame 12 is 352x198, frame 0 is 320x180: the top camera changed its size"),
        ("not_jpeg", r"frame 5 is not a whole JPEG image"),
        ("very_late_start", r"row 0 .* from the nearest top camera frame"),
        ("bad_byte", r"top_frame_log\.csv line 6: byte 0xff is not UTF-8 text"),
        ("huge_field", r"top_frame_log\.csv line 6: not readable as csv: field larger"),
    ],
)
def test_unusable_top_recordings_are_refused(
    recs: Any, data_root: Path, tmp_path: Path, fault: str, message: str
) -> None:
    good = recs.write(data_root, recs.stem(1), seed=1, duration=3.0)
    bad = recs.write(
        data_root, recs.stem(2), seed=2, duration=3.0, top=fault in ("no_log", "no_mkv")
    )
    files = DataRoot(data_root)
    rel = recs.top_capture_times(3.0, 2)
    wall0 = recs.T0 + 2 * 1000
    if fault == "no_mkv":
        files.top_video(bad.run_stem).unlink()
    elif fault == "no_log":
        files.top_frame_log(bad.run_stem).unlink()
    elif fault == "short_log":
        recs.write_top(data_root, bad.run_stem, rel, wall0, log_rows=len(rel) - 3)
    elif fault == "gap":  # the camera stalled for 1.2 s mid-trial
        hole = (rel > 1.0) & (rel < 2.2)
        recs.write_top(data_root, bad.run_stem, rel[~hole], wall0)
    elif fault == "resized":
        sizes = [(320, 180)] * 12 + [(352, 198)] * (len(rel) - 12)
        recs.write_top(data_root, bad.run_stem, rel, wall0, sizes=sizes)
    elif fault == "not_jpeg":
        recs.write_top(data_root, bad.run_stem, rel, wall0)
        _damage_packet(files.top_video(bad.run_stem), 5)
    elif fault == "very_late_start":  # the top recording began 2.6 s into a 3 s trial
        recs.write_top(data_root, bad.run_stem, rel[rel > 2.6], wall0)
    elif fault in ("bad_byte", "huge_field"):  # a damaged frame log: line 6 (frame 4)
        recs.write_top(data_root, bad.run_stem, rel, wall0)
        log = files.top_frame_log(bad.run_stem)
        lines = log.read_bytes().split(b"\n")
        lines[5] = (b"\xff" if fault == "bad_byte" else b"9" * 200_000 + b",") + lines[5]
        log.write_bytes(b"\n".join(lines))
    for t in (good, bad):
        recs.ledger(data_root, t)
    out = tmp_path / "ds"
    rep = export_lerobot(data_root, out, _settings())
    assert [e.run_stem for e in rep.exported] == [good.run_stem]
    assert [s.run_stem for s in rep.refused] == [bad.run_stem]
    assert re.search(message, rep.refused[0].reason), rep.refused[0].reason
    if fault.startswith("no_"):
        assert "--cameras side" in rep.refused[0].reason  # says what to do
    # the same trial goes into a side-only dataset
    rep2 = export_lerobot(data_root, tmp_path / "side", _settings(cameras=["side"]))
    assert sorted(e.run_stem for e in rep2.exported) == [good.run_stem, bad.run_stem]


def _damage_packet(mkv: Path, index: int) -> None:
    """Overwrite the start marker of packet ``index`` in place (same length, still muxed)."""
    data = bytearray(mkv.read_bytes())
    pos = -1
    for _ in range(index + 1):
        pos = data.index(b"\xff\xd8\xff", pos + 1)
    data[pos : pos + 2] = b"\x00\x00"
    mkv.write_bytes(bytes(data))


def test_refusal_quotes_the_run_log(recs: Any, data_root: Path, tmp_path: Path) -> None:
    t = recs.write(data_root, recs.stem(1), seed=1, duration=2.0, top=False)
    DataRoot(data_root).runlog(t.run_stem).write_text(
        json.dumps(
            {"top_video": {"status": "off", "frames": 0, "dropped": 0, "reason": "--no-top-video"}}
        )
    )
    recs.ledger(data_root, t)
    rep = export_lerobot(data_root, tmp_path / "ds", _settings())
    assert "the run log says top_video off: --no-top-video" in rep.refused[0].reason


def test_side_only_dataset_is_the_one_camera_format(
    recs: Any, data_root: Path, tmp_path: Path
) -> None:
    with_top = recs.write(data_root, recs.stem(1), seed=1, duration=3.0)
    without = recs.write(data_root, recs.stem(2), seed=2, duration=2.5, top=False)
    for t in (with_top, without):
        recs.ledger(data_root, t)
    out = tmp_path / "ds"
    rep = export_lerobot(data_root, out, _settings(cameras=["side"]))
    assert len(rep.exported) == 2 and not rep.refused
    info = json.loads((out / L.INFO_PATH).read_text())
    assert info["features"] == L.features(96, 192, FPS)
    assert L.TOP_VIDEO_KEY not in info["features"]
    assert not (out / "videos" / L.TOP_VIDEO_KEY).exists()
    table = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet")
    assert table.schema.names == L.episodes_schema().names
    assert not any("images.top" in n for n in table.schema.names)
    stats = json.loads((out / L.STATS_PATH).read_text())
    assert list(stats) == list(L.FEATURE_ORDER)
    manifest = json.loads((out / L.MANIFEST_PATH).read_text())
    assert manifest["cameras"] == ["side"] and "top_video" not in manifest
    assert verify_dataset(out).ok


def test_cameras_are_fixed_by_the_first_export(
    recs: Any, data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recs.ledger(data_root, recs.write(data_root, recs.stem(1), seed=1, duration=2.0))
    side, both = tmp_path / "side", tmp_path / "both"
    base = ["export", "lerobot", "--root", str(data_root), "--no-progress"]
    assert main([*base, "--out", str(side), "--cameras", "side"]) == 0
    assert main([*base, "--out", str(both)]) == 0
    capsys.readouterr()
    recs.ledger(data_root, recs.write(data_root, recs.stem(2), seed=2, duration=2.0))
    assert main([*base, "--out", str(side)]) == 2
    err = capsys.readouterr().err
    assert "first exported with cameras side; cannot add episodes with --cameras side,top" in err
    assert main([*base, "--out", str(both), "--cameras", "side"]) == 2
    assert "first exported with cameras side,top" in capsys.readouterr().err
    assert main([*base, "--out", str(side), "--cameras", "side"]) == 0
    assert main([*base, "--out", str(both), "--cameras", "top,side", "--top-width", "640"]) == 0
    assert json.loads((both / L.INFO_PATH).read_text())["total_episodes"] == 2
    eps = pq.read_table(both / "meta/episodes").to_pylist()
    assert [e[f"videos/{L.TOP_VIDEO_KEY}/file_index"] for e in eps] == [0, 1]
    assert (both / TOP_DIR / "file-001.mp4").is_file()
    assert main([*base, "--out", str(tmp_path / "x"), "--cameras", "top"]) == 2
    assert "must include side" in capsys.readouterr().err


def test_jpeg_size_reads_headers_only() -> None:
    import cv2

    ok, jpg = cv2.imencode(".jpg", np.zeros((36, 50, 3), np.uint8))
    assert ok and jpeg_size(jpg.tobytes(), whole=True) == (50, 36)
    assert jpeg_size(jpg.tobytes()[:-200], whole=True) is None  # cut: no end marker
    assert jpeg_size(b"\x89PNG\r\n\x1a\n" + bytes(100)) is None
    assert jpeg_size(b"") is None


def test_two_camera_tables_are_the_one_camera_tables_plus_the_top_columns(
    recs: Any, data_root: Path, tmp_path: Path
) -> None:
    """Every top column has the type of its side twin, sits right after the side's, and
    without them the tables are the one-camera tables (checked against lerobot's own
    dataset in test_format.py)."""
    recs.ledger(data_root, recs.write(data_root, recs.stem(1), seed=1, duration=2.0))
    out = tmp_path / "ds"
    export_lerobot(data_root, out, _settings())
    schema = pq.read_schema(out / "meta/episodes/chunk-000/file-000.parquet")
    names = schema.names
    top = [n for n in names if L.TOP_VIDEO_KEY in n]
    assert len(top) == 4 + 10  # chunk, file, from, to; min max mean std count q01..q99
    for name in top:
        twin = name.replace(L.TOP_VIDEO_KEY, L.VIDEO_KEY)
        assert schema.field(name).type == schema.field(twin).type, name
    assert (
        names.index(f"videos/{L.TOP_VIDEO_KEY}/chunk_index")
        == names.index(f"videos/{L.VIDEO_KEY}/to_timestamp") + 1
    )
    assert (
        names.index(f"stats/{L.TOP_VIDEO_KEY}/min") == names.index(f"stats/{L.VIDEO_KEY}/q99") + 1
    )
    one_camera = [n for n in names if n not in top]
    assert one_camera == L.episodes_schema().names
    assert pq.read_schema(out / "data/chunk-000/file-000.parquet").equals(L.data_schema())
    info = json.loads((out / L.INFO_PATH).read_text())
    assert {k: v for k, v in info["features"].items() if k != L.TOP_VIDEO_KEY} == L.features(
        96, 192, FPS
    )
    side, topf = info["features"][L.VIDEO_KEY], info["features"][L.TOP_VIDEO_KEY]
    assert list(topf) == list(side) and list(topf["info"]) == list(side["info"])


def test_lerobot_columns_are_exactly_what_lerobot_record_writes(
    recs: Any, data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--columns lerobot``: the features, data columns, episode columns and stats of a
    dataset lerobot-record writes on this robot with side and top cameras (state, action,
    the two videos, lerobot's index columns), nothing of ours; the outcomes stay in the
    manifest; the dataset verifies; a later export with the other columns is refused."""
    for i in (1, 2):
        recs.ledger(data_root, recs.write(data_root, recs.stem(i), seed=i, duration=2.5))
    out = tmp_path / "plain"
    base = ["export", "lerobot", "--root", str(data_root), "--out", str(out), "--no-progress"]
    assert main([*base, "--columns", "lerobot"]) == 0
    own = ("observation.state", "action", L.VIDEO_KEY, L.TOP_VIDEO_KEY, *L.INDEX_FEATURES)
    info = json.loads((out / L.INFO_PATH).read_text())
    assert tuple(info["features"]) == own
    assert tuple(json.loads((out / L.STATS_PATH).read_text())) == own
    data = pq.read_table(out / "data/chunk-000/file-000.parquet")
    assert tuple(data.schema.names) == tuple(k for k in own if "images" not in k)
    hf = json.loads(data.schema.metadata[b"huggingface"])["info"]["features"]
    assert tuple(hf) == tuple(data.schema.names)
    eps = pq.read_table(out / "meta/episodes").to_pylist()
    assert len(eps) == 2
    assert not [k for k in eps[0] if k.startswith("mecharm") or k.startswith("stats/next.")]
    manifest = json.loads((out / L.MANIFEST_PATH).read_text())
    assert manifest["columns"] == "lerobot"
    assert [e["success"] for e in manifest["episodes"]] == [True, True]
    assert verify_dataset(out).ok
    # the same trials with every column: the same state, action and index values
    full = tmp_path / "full"
    assert main([*base[:-3], "--out", str(full), "--no-progress"]) == 0
    full_data = pq.read_table(full / "data/chunk-000/file-000.parquet")
    assert data.equals(full_data.select(data.schema.names).cast(data.schema))
    capsys.readouterr()
    recs.ledger(data_root, recs.write(data_root, recs.stem(3), seed=3, duration=2.5))
    assert main(base) == 2
    assert "first exported with --columns lerobot" in capsys.readouterr().err
    assert main([*base, "--columns", "lerobot"]) == 0
    assert json.loads((out / L.INFO_PATH).read_text())["total_episodes"] == 3
    with pytest.raises(SystemExit) as exc:
        main([*base, "--columns", "plain"])
    assert exc.value.code == 2
    assert "invalid choice: 'plain'" in capsys.readouterr().err


def test_measured_action_is_fixed_by_the_first_export(
    recs: Any, data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--action measured``: each row's action joints are the next row's state joints,
    the manifest says so, and a later export with the other meaning is refused."""
    recs.ledger(data_root, recs.write(data_root, recs.stem(1), seed=1, duration=2.5))
    out = tmp_path / "ds"
    base = ["export", "lerobot", "--root", str(data_root), "--out", str(out), "--no-progress"]
    assert main([*base, "--action", "measured"]) == 0
    data = pq.read_table(out / "data/chunk-000/file-000.parquet").to_pydict()
    state, action = np.array(data["observation.state"]), np.array(data["action"])
    np.testing.assert_array_equal(action[:-1, :6], state[1:, :6])
    assert json.loads((out / L.MANIFEST_PATH).read_text())["action"] == "measured"
    assert verify_dataset(out).ok
    recs.ledger(data_root, recs.write(data_root, recs.stem(2), seed=2, duration=2.5))
    capsys.readouterr()
    assert main(base) == 2
    assert "first exported with --action measured" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main([*base, "--action", "next"])
    assert exc.value.code == 2
    assert "invalid choice: 'next'" in capsys.readouterr().err


def test_a_top_recording_that_starts_late_moves_the_first_row_not_the_trial(
    recs: Any, data_root: Path, tmp_path: Path
) -> None:
    """The top camera's first frame comes about a second after it opens: the rows begin
    where both cameras have frames (up to 2 s of the start left out), timestamps from 0;
    every row's top frame within the limit; the same trial side-only keeps every row."""
    trial = recs.write(data_root, recs.stem(1), seed=1, duration=3.0)
    rel = recs.top_capture_times(3.0, 1)
    recs.write_top(data_root, trial.run_stem, rel[rel > 0.9], recs.T0 + 1000)
    recs.ledger(data_root, trial)
    rep = export_lerobot(data_root, tmp_path / "both", _settings())
    assert [e.run_stem for e in rep.exported] == [trial.run_stem], rep.refused
    side = export_lerobot(data_root, tmp_path / "side", _settings(cameras=["side"]))
    both_rows, side_rows = rep.exported[0].length, side.exported[0].length
    assert side_rows - 9 <= both_rows <= side_rows - 4  # 0.4-0.9 s of rows left out
    data = pq.read_table(tmp_path / "both" / "data/chunk-000/file-000.parquet").to_pydict()
    assert data["timestamp"][0] == 0.0 and data["frame_index"][0] == 0
    assert verify_dataset(tmp_path / "both").ok
