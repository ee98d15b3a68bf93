"""The video writer: H.264 in fragmented MP4, PTS = real capture times, keyframes and fragments by capture time."""

from __future__ import annotations

import itertools
import struct

import av
import cv2
import numpy as np
import pytest

from mecharm.recorder.config import VideoSettings
from mecharm.recorder.repair import probe_video
from mecharm.recorder.video import VideoWriter, bgr_to_i420


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


def _reference_i420(img: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BT.601 limited-range Y, and Cb/Cr each the mean of its 2x2 block, in floats."""
    b, g, r = (img[..., i].astype(np.float64) for i in range(3))
    y = 16 + (65.481 * r + 128.553 * g + 24.966 * b) / 255
    cb = 128 + (-37.797 * r - 74.203 * g + 112.0 * b) / 255
    cr = 128 + (112.0 * r - 93.786 * g - 18.214 * b) / 255
    h, w = y.shape

    def mean2x2(c: np.ndarray) -> np.ndarray:
        return c.reshape(h // 2, 2, w // 2, 2).mean(axis=(1, 3))

    return y, mean2x2(cb), mean2x2(cr)


@pytest.mark.parametrize(("w", "h"), [(160, 120), (162, 118)])
def test_conversion_averages_chroma_like_ffmpeg(w, h):
    rng = np.random.default_rng(1)
    img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)  # worst case: every pixel differs
    yuv = bgr_to_i420(img)
    y, cb, cr = _reference_i420(img)
    flat = yuv.reshape(-1)
    n = (h // 2) * (w // 2)
    got_u = flat[h * w : h * w + n].reshape(h // 2, w // 2)
    got_v = flat[h * w + n :].reshape(h // 2, w // 2)
    assert np.abs(flat[: h * w].reshape(h, w) - y).max() <= 1.0
    assert np.abs(got_u - cb).max() <= 1.6 and np.abs(got_v - cr).max() <= 1.6
    # and FFmpeg's own scaler (what a plain PyAV encode uses) agrees within 2 levels
    ff = av.VideoFrame.from_ndarray(img, format="bgr24").reformat(format="yuv420p").to_ndarray()
    assert np.abs(ff.astype(int) - yuv).max() <= 2


@pytest.mark.parametrize(("w", "h"), [(320, 240), (322, 238)])  # h % 4 == 0: no-copy path
def test_decoded_pixels_and_pts_match_what_was_written(tmp_path, w, h):
    """A fine colour pattern (1-pixel stripes of red and blue) over gradients: the decoded
    video's 2x2 means must be the input's, which a point-sampled chroma gets wrong."""
    path = tmp_path / "v.mp4"
    frames, times = [], []
    base = np.zeros((h, w, 3), np.uint8)
    base[..., 1] = np.linspace(30, 220, w, dtype=np.uint8)[None, :]
    for i in range(12):
        img = base.copy()
        img[:, ::2, 2] = 220  # red on even columns
        img[:, 1::2, 0] = 220  # blue on odd ones
        img[: 20 + 5 * i, :40] = (255, 255, 255)  # something that moves
        frames.append(img)
        times.append(7_000_000_000 + i * 35_000_000 + (i % 3) * 4_000_000)
    wr = VideoWriter(path, VideoSettings(preset="ultrafast", crf=12))
    for img, t in zip(frames, times, strict=True):
        assert wr.write(img, t)
    wr.close()
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        assert (s.codec_context.width, s.codec_context.height) == (w, h)
        decoded = [(f.pts * f.time_base, f.to_ndarray(format="bgr24")) for f in c.decode(s)]
    assert len(decoded) == len(frames)
    got_s = [float(p) for p, _ in decoded]
    assert np.allclose(got_s, [(t - times[0]) / 1e9 for t in times], atol=1 / 90_000)

    def mean2x2(a: np.ndarray) -> np.ndarray:
        return a.reshape(h // 2, 2, w // 2, 2, 3).astype(np.float64).mean(axis=(1, 3))

    for (_, out), img in zip(decoded, frames, strict=True):
        err = np.abs(mean2x2(out) - mean2x2(img))
        assert err.mean() <= 3.0, err.mean()  # codec loss; point-sampled chroma: ~40 levels
        luma = [cv2.cvtColor(a, cv2.COLOR_BGR2GRAY) for a in (out, img)]
        assert cv2.PSNR(*luma) >= 30.0  # luma keeps full resolution
