"""The video writer: H.264 in fragmented MP4, PTS = real capture times, keyframes and fragments by capture time."""

from __future__ import annotations

import itertools
import struct

import av
import numpy as np
import pytest

from recorder.config import VideoSettings
from recorder.repair import probe_video
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
        keys = [
            float(p.pts * p.time_base)
            for p in c.demux(video=0)
            if p.is_keyframe and p.pts is not None
        ]
    # one keyframe per second of capture time (30 frames here span ~1.4 s: time decides)
    assert keys[0] == 0 and len(keys) == int((times[-1] - start) / 1e9) + 1
    assert all(1.0 <= b - a <= 1.0 + 0.096 for a, b in itertools.pairwise(keys))
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


def _top_boxes(data: bytes) -> list[tuple[bytes, int, int]]:
    """(type, offset, size) of the mp4's top-level boxes, as far as they are complete."""
    out, pos = [], 0
    while pos + 8 <= len(data):
        size, kind = struct.unpack(">I4s", data[pos : pos + 8])
        if size < 8 or pos + size > len(data):
            break
        out.append((kind, pos, size))
        pos += size
    return out


def test_a_slow_camera_still_gets_a_keyframe_a_second_and_short_fragments(tmp_path):
    """15 fps against a nominal 30: a GOP counted in frames would be 2 s; capture time rules."""
    path = tmp_path / "v.mp4"
    s = VideoSettings(preset="ultrafast", container_fps=30, gop_sec=1.0, fragment_sec=0.25)
    w = VideoWriter(path, s)
    times = [i * 66_666_667 for i in range(75)]  # 5 s at 15 fps
    on_disk = []
    for img, t in zip(_frames(len(times)), times, strict=True):
        assert w.write(img, t)
        on_disk.append(path.read_bytes())  # what a SIGKILL right now would leave
    w.close()
    boxes = [b for b in _top_boxes(path.read_bytes()) if b[0] == b"moof"]
    assert len(boxes) >= 5 / 0.25 - 1  # a fragment per 0.25 s (4 frames at 15 fps)
    with av.open(str(path)) as c:
        keys = [float(p.pts * p.time_base) for p in c.demux(video=0) if p.is_keyframe]
    assert keys == pytest.approx([0.0, 1.0, 2.0, 3.0, 4.0], abs=0.07)
    # a kill after any frame loses at most the open fragment: fragment_sec + one frame
    for k in (10, 33, 52, 74):
        killed = tmp_path / f"killed_{k}.mp4"
        killed.write_bytes(on_disk[k])
        probe = probe_video(killed)
        assert probe.frames <= k + 1
        lost_s = (times[k] - times[probe.frames - 1]) / 1e9
        assert lost_s <= 0.25 + 0.067 + 1e-6, (k, probe.frames, lost_s)
