"""Camera sources: synthetic (with faults), the HTTP MJPEG reader, files, names, the factory."""

from __future__ import annotations

import os
import socket
import threading
import time
from fractions import Fraction

import av
import numpy as np
import pytest

from mecharm.cameras import (
    CameraNameError,
    CameraNotOpenError,
    CameraOpenError,
    MjpegHttpCamera,
    OpenCVCamera,
    SyntheticCamera,
    VideoFileCamera,
    make_camera,
    open_camera,
    resolve_camera_name,
    synthetic_faults,
)

# --- synthetic -----------------------------------------------------------------------------


def test_synthetic_defaults_to_720p_and_paces_frames():
    cam = open_camera("synthetic?fps=50")
    try:
        frames = [cam.read() for _ in range(6)]
    finally:
        cam.close()
    assert all(f.ok for f in frames)
    assert frames[0].image.shape == (720, 1280, 3) and frames[0].image.dtype == np.uint8
    span_ms = (frames[-1].mono_ns - frames[0].mono_ns) / 1e6
    assert span_ms >= 5 * 20 * 0.9  # paced at 50 fps, not flat out (load can only make it slower)
    assert not np.array_equal(frames[0].image, frames[1].image)  # counter changes
    ok, _image, wall, mono = frames[-1]  # unpacks like OpenCV
    assert ok and abs(wall - time.time()) < 5 and mono > 0


def test_synthetic_faults_stall_fail_freeze_disconnect():
    cam = SyntheticCamera(fps=100, width=160, height=120)
    cam.open()
    f = cam.faults
    f.fail_next(2)
    assert [cam.read().ok for _ in range(3)] == [False, False, True]
    f.freeze()
    a, b = cam.read(), cam.read()
    assert a.ok and b.ok and np.array_equal(a.image, b.image) and b.mono_ns > a.mono_ns
    f.freeze(False)
    assert not np.array_equal(cam.read().image, b.image)
    f.stall(0.3)
    t0 = time.monotonic()
    assert cam.read().ok and time.monotonic() - t0 >= 0.28
    f.disconnect()
    assert not cam.read().ok
    cam.close()
    with pytest.raises(CameraOpenError, match="disconnect"):
        cam.open()
    f.reconnect()
    cam.open()
    assert cam.read().ok
    cam.close()
    with pytest.raises(CameraNotOpenError):
        cam.read()


def test_close_unblocks_a_stalled_read():
    cam = SyntheticCamera(fps=30, width=64, height=48)
    cam.open()
    cam.faults.stall(3600)  # only close() can end this read before the suite's timeout
    threading.Timer(0.2, cam.close).start()
    assert not cam.read().ok


def test_synthetic_spec_options_and_shared_faults_by_id():
    cam = make_camera("synthetic?fps=12&w=64&h=48&id=t-cam-1")
    assert isinstance(cam, SyntheticCamera) and (cam.fps, cam.width, cam.height) == (12, 64, 48)
    assert cam.faults is synthetic_faults("t-cam-1")
    frozen = make_camera("synthetic?fps=100&w=64&h=48&freeze_after=0")
    frozen.open()
    a, b = frozen.read(), frozen.read()
    frozen.close()
    assert np.array_equal(a.image, b.image)
    for bad, msg in [
        ("synthetic?bogus=1", "unknown synthetic option"),
        ("synthetic?fps=x", "fps"),
        ("synthetic?fps=0", "fps"),
        ("", "empty"),
        ("/no/such/file.mp4", "not a source"),
    ]:
        with pytest.raises(ValueError, match=msg):
            make_camera(bad)


def test_factory_dispatch():
    assert isinstance(make_camera("0"), OpenCVCamera)
    assert isinstance(make_camera("http://127.0.0.1:1/side.mjpg"), MjpegHttpCamera)
    assert isinstance(make_camera("rtsp://127.0.0.1:1/x"), OpenCVCamera)
    with pytest.raises(ValueError, match="http://"):
        MjpegHttpCamera("ftp://x/y")


# --- HTTP MJPEG ----------------------------------------------------------------------------


@pytest.mark.parametrize("with_length", [True, False])
def test_mjpeg_reads_frames_in_order_and_detects_disconnect(mjpeg_server, with_length):
    srv = mjpeg_server(with_length=with_length, boundary="frame")
    cam = open_camera(srv.url)
    try:
        frames = [cam.read() for _ in range(8)]
        assert all(f.ok for f in frames)
        assert frames[0].image.shape == (240, 320, 3)
        numbers = [srv.frame_number(f.image) for f in frames]
        assert numbers == sorted(set(numbers))  # every read is a newer frame, never a repeat
        assert srv.requests[0].startswith(b"GET /side.mjpg HTTP/1.0")
        srv.drop_clients()
        results = [cam.read().ok for _ in range(3)]
        assert results[-1] is False and cam.failure
    finally:
        cam.close()
    assert not cam.is_open


def test_mjpeg_quoted_boundary_and_dashes(mjpeg_server):
    srv = mjpeg_server(
        boundary="--myboundary", content_type='multipart/x-mixed-replace;boundary="--myboundary"'
    )
    with open_camera(srv.url) as cam:
        assert cam.read().ok


def _until(cond, what: str) -> None:
    """Poll for a count to be reached; the count, not the wall time, is what the test is about."""
    for _ in range(3000):  # ~30 s: only a broken stream gets there
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError(f"never reached: {what}")


def _read_ok(cam):
    """The next good frame: a loaded machine may make one read wait past read_timeout."""
    for _ in range(20):
        f = cam.read()
        if f.ok:
            return f
    raise AssertionError(f"no frame in 20 reads: {cam.failure}")


def test_mjpeg_read_returns_newest_frame_not_a_backlog(mjpeg_server):
    srv = mjpeg_server(fps=100)
    with open_camera(srv.url) as cam:
        _read_ok(cam)
        _until(lambda: cam.parts_received >= 12, "12 parts received")  # 10+ arrive unread
        f = cam.read()
        assert f.ok
        assert srv.frame_number(f.image) >= 11  # a backlog reader would hand out frame 1 or 2 here


def test_mjpeg_bad_jpeg_is_a_failed_read_not_a_crash(mjpeg_server):
    srv = mjpeg_server(garbage_every=2)
    with open_camera(srv.url) as cam:
        oks = [cam.read().ok for _ in range(6)]
    assert True in oks and False in oks


def test_mjpeg_stall_is_a_failed_read(mjpeg_server):
    srv = mjpeg_server()
    cam = MjpegHttpCamera(srv.url, read_timeout=0.3)
    cam.open()
    try:
        _read_ok(cam)
        srv.paused.set()
        # a frame already on its way may still be read; then the stream is silent
        for _ in range(5):
            t0 = time.monotonic()
            if not cam.read().ok:
                break
        else:
            raise AssertionError("reads kept succeeding on a paused stream")
        assert time.monotonic() - t0 >= 0.25  # it waited for read_timeout (a lower bound)
        assert cam.is_open and cam.failure is None  # a stall is not a disconnect
        srv.paused.clear()
        _read_ok(cam)
    finally:
        cam.close()


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"status": "404 Not Found"}, "404"),
        ({"content_type": "image/jpeg"}, "not multipart"),
        ({"content_type": "multipart/x-mixed-replace"}, "boundary"),
    ],
)
def test_mjpeg_open_errors_name_the_cause(mjpeg_server, kw, msg):
    """...and close the connection at once: while the error (and the frames it keeps, with
    the socket's file) is still held, no socket of this process stays open."""
    srv = mjpeg_server(**kw)

    def sockets() -> int:
        return sum(os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
                   for fd in os.listdir("/proc/self/fd") if os.path.exists(f"/proc/self/fd/{fd}"))  # fmt: skip

    before = sockets()
    with pytest.raises(CameraOpenError, match=msg) as err:
        open_camera(srv.url)
    assert err.value.__cause__ is not None  # the frames with the socket's file are still held
    # the server's own accepted end may linger a moment: count only what this test opened
    # itself (the server's listening socket was open before)
    assert sockets() <= before + 1


def test_mjpeg_connection_refused():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(CameraOpenError, match="cannot connect"):
        open_camera(f"http://127.0.0.1:{port}/side.mjpg")


def test_mjpeg_garbage_server_fails_cleanly():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def serve() -> None:
        conn, _ = srv.accept()
        conn.recv(1024)
        conn.sendall(
            b"HTTP/1.0 200 OK\r\nContent-Type: multipart/x-mixed-replace; boundary=b\r\n\r\n"
            b"--b\r\nContent-Length: 99999999999\r\n\r\n"
        )
        time.sleep(0.5)
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    cam = open_camera(f"http://127.0.0.1:{srv.getsockname()[1]}/x")
    try:
        assert not cam.read().ok
        assert "Content-Length" in (cam.failure or "")
    finally:
        cam.close()
        srv.close()


# --- video file ----------------------------------------------------------------------------


def test_video_file_source_loops(tmp_path):
    path = tmp_path / "clip.mp4"
    with av.open(str(path), "w") as out:
        st = out.add_stream("libx264", rate=Fraction(50))
        st.width, st.height, st.pix_fmt = 64, 48, "yuv420p"
        for i in range(5):
            img = np.full((48, 64, 3), i * 40, np.uint8)
            out.mux(st.encode(av.VideoFrame.from_ndarray(img, format="bgr24")))
        out.mux(st.encode(None))
    cam = open_camera(str(path))
    assert isinstance(cam, VideoFileCamera)
    try:
        frames = [cam.read() for _ in range(12)]
    finally:
        cam.close()
    assert all(f.ok for f in frames)
    levels = [int(f.image[10, 10].mean()) // 20 for f in frames]
    assert levels[0] == levels[5] == levels[10]  # looped after 5 frames


# --- names ---------------------------------------------------------------------------------


def _fake_v4l(tmp_path, devices):
    sysfs, by_id = tmp_path / "sys", tmp_path / "by-id"
    by_id.mkdir()
    for idx, name, index_attr in devices:
        node = sysfs / f"video{idx}"
        node.mkdir(parents=True)
        (node / "name").write_text(name + "\n")
        (node / "index").write_text(f"{index_attr}\n")
    return sysfs, by_id


def test_resolve_camera_name_linux_sysfs(tmp_path):
    sysfs, by_id = _fake_v4l(
        tmp_path,
        [
            (0, "Integrated Camera", 0),
            (1, "Integrated Camera", 1),
            (2, "Iriun Webcam", 0),
            (3, "Iriun Webcam", 1),
        ],
    )
    assert resolve_camera_name("iriun", sysfs, by_id) == 2
    assert resolve_camera_name("Integrated", sysfs, by_id) == 0
    with pytest.raises(CameraNameError, match="no camera named 'Logitech'"):
        resolve_camera_name("Logitech", sysfs, by_id)
    with pytest.raises(CameraNameError, match="ambiguous"):
        resolve_camera_name("cam", sysfs, by_id)


def test_resolve_camera_name_by_id_links(tmp_path):
    by_id = tmp_path / "by-id"
    by_id.mkdir()
    os.symlink("/dev/video4", by_id / "usb-Jieli_Technology_USB_PHY_2.0-video-index0")
    assert resolve_camera_name("jieli", tmp_path / "nosys", by_id) == 4


def test_mjpeg_basic_auth_from_the_url(mjpeg_server):
    import base64

    srv = mjpeg_server()
    url = srv.url.replace("http://", "http://phone:s%40cret@")
    cam = open_camera(url)
    try:
        assert cam.read().ok
        assert "s%40cret" not in cam.spec  # never logged
    finally:
        cam.close()
    token = base64.b64encode(b"phone:s@cret")
    assert b"Authorization: Basic " + token in srv.requests[0]
