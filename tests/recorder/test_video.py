"""The video writer: H.264 in fragmented MP4, PTS = real capture times, ~1 s GOP."""

from __future__ import annotations

import av
import numpy as np
import pytest

from recorder.config import VideoSettings
from recorder.video import VideoWriter


def _frames(n, w=160, h=120):
    for i in range(n):
        img = np.zeros((h, w, 3), np.uint8)
        img[:, : (i * 3) % w] = 200
        yield img


def test_pts_are_capture_times_and_keyframes_every_gop(tmp_path):
    path = tmp_path / "v.mp4"
    w = VideoWriter(path, VideoSettings(preset="ultrafast", container_fps=30, gop_sec=1.0))
    start = 5_000_000_000
    # irregular intervals, like the real side camera (p50 35.7 ms, gaps > 90 ms)
    gaps_ms = [33, 36, 95, 33, 40] * 14
    times = np.cumsum([0, *gaps_ms]) * 1_000_000 + start
    for img, t in zip(_frames(len(times)), times, strict=True):
        assert w.write(img, int(t))
    w.close()
    w.close()  # idempotent
    assert w.frames_written == len(times) and w.anchor_mono_ns == start and w.gop == 30
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        assert s.codec_context.name == "h264" and s.codec_context.pix_fmt == "yuv420p"
        decoded = [(f.pts, f.time_base) for f in c.decode(s)]
    assert len(decoded) == len(times)
    got_ms = [float(p * tb) * 1000 for p, tb in decoded]
    want_ms = [(t - start) / 1e6 for t in times]
    assert np.allclose(got_ms, want_ms, atol=0.02)
    with av.open(str(path)) as c:
        keys = [p.pts for p in c.demux(video=0) if p.is_keyframe and p.pts is not None]
    assert len(keys) == pytest.approx(len(times) / 30, abs=1)
    head = path.read_bytes()[:4096]
    assert b"moof" in path.read_bytes() and b"mvex" in head  # fragmented


def test_size_change_is_refused_not_crashed(tmp_path):
    w = VideoWriter(tmp_path / "v.mp4", VideoSettings(preset="ultrafast"))
    assert w.write(np.zeros((120, 160, 3), np.uint8), 0)
    assert not w.write(np.zeros((240, 320, 3), np.uint8), 10_000_000)
    w.close()
    assert w.frames_written == 1
    with pytest.raises(ValueError):
        w.write(np.zeros((120, 160, 3), np.uint8), 20_000_000)


def test_unwritable_path_raises(tmp_path):
    w = VideoWriter(tmp_path / "missing_dir" / "v.mp4")
    with pytest.raises((OSError, av.error.FFmpegError)):
        w.write(np.zeros((120, 160, 3), np.uint8), 0)
