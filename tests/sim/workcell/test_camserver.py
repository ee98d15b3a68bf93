"""The workcell's cameras and scene endpoints over real HTTP on loopback."""

from __future__ import annotations

import http.client
import json
import math
import socket
import time
from collections.abc import Iterator
from typing import Any

import cv2
import numpy as np
import pytest

from mecharm.cameras import open_camera
from mecharm.sim.camserver import CameraServer, json_depth
from mecharm.sim.workcell import Workcell, WorkcellConfig, start_workcell


@pytest.fixture
def served(rig) -> Iterator[Workcell]:
    wc = rig.wc
    wc.serve("127.0.0.1", 0)
    yield wc


def _port(wc: Workcell) -> int:
    assert wc.server is not None
    return wc.server.port


def _read_parts(
    port: int, path: str, n: int
) -> tuple[http.client.HTTPResponse, list[tuple[dict[str, str], bytes]]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path)
    resp = conn.getresponse()
    parts = []
    for _ in range(n):
        line = resp.fp.readline()
        while line in (b"\r\n", b"\n"):
            line = resp.fp.readline()
        assert line.strip() == b"--frame", line
        headers = {}
        while h := resp.fp.readline().strip():
            k, v = h.decode().split(":", 1)
            headers[k.strip().lower()] = v.strip()
        body = resp.fp.read(int(headers["content-length"]))
        parts.append((headers, body))
    conn.close()
    return resp, parts


def _good_frames(cam: Any, n: int) -> list[Any]:
    """``n`` good frames in order. Rendering 1080p on a loaded machine can outlast one
    read's timeout; a timed-out read returns no frame (never a wrong one), so retry it."""
    frames = []
    for _ in range(n + 20):
        f = cam.read()
        if f.ok:
            frames.append(f)
            if len(frames) == n:
                return frames
    raise AssertionError(f"{len(frames)} of {n} frames in {n + 20} reads: {cam.failure}")


def _poll(cond: Any, what: str) -> None:
    for _ in range(600):  # ~30 s: only a broken feed gets there
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"never reached: {what}")


def test_mjpeg_stream_format(served: Workcell) -> None:
    resp, parts = _read_parts(_port(served), "/side.mjpg", 3)
    assert resp.status == 200
    assert resp.getheader("Content-Type") == "multipart/x-mixed-replace; boundary=frame"
    for headers, body in parts:
        assert headers["content-type"] == "image/jpeg"
        img = cv2.imdecode(np.frombuffer(body, np.uint8), cv2.IMREAD_COLOR)
        assert img.shape == (720, 1280, 3)


def test_top_camera_through_the_recorders_camera_source(served: Workcell) -> None:
    cam = open_camera(served.urls["top"])
    try:
        frames = _good_frames(cam, 3)
    finally:
        cam.close()
    assert frames[0].image.shape == (1080, 1920, 3)
    assert frames[2].wall_ts > frames[0].wall_ts


def test_rendering_is_lazy(served: Workcell) -> None:
    feeds = served.server.feeds  # type: ignore[union-attr]
    time.sleep(0.3)
    assert feeds["top"].frames_rendered == 0 and feeds["side"].frames_rendered == 0
    _read_parts(_port(served), "/top.mjpg", 2)
    _poll(lambda: feeds["top"].clients == 0, "the client is gone")
    _poll(lambda: feeds["top"]._thread is None, "the producer stops")  # nobody watches
    n = feeds["top"].frames_rendered
    assert n >= 2
    time.sleep(0.4)
    assert feeds["top"].frames_rendered == n
    assert feeds["side"].frames_rendered == 0


def _request(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(
        method, path, body=body, headers={"Content-Type": "application/json"} if body else {}
    )
    resp = conn.getresponse()
    data = json.loads(resp.read())
    conn.close()
    return resp.status, data


def test_scene_endpoints(served: Workcell) -> None:
    port = _port(served)
    status, truth = _request(port, "GET", "/scene/truth")
    assert status == 200 and truth["layout"]["seed"] == 3
    status, nxt = _request(port, "POST", "/scene/next", json.dumps({"seed": 42}).encode())
    assert status == 200 and nxt["layout"]["seed"] == 42
    status, nxt = _request(port, "POST", "/scene/next?seed=43")
    assert status == 200 and nxt["layout"]["seed"] == 43
    status, nxt = _request(port, "POST", "/scene/next")
    assert status == 200 and nxt["layout"]["seed"] not in (42, 43)
    assert json.loads(json.dumps(served.truth()["layout"])) == nxt["layout"]


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "needle"),
    [
        ("POST", "/scene/next", b"{not json", 400, "not valid JSON"),
        ("POST", "/scene/next", b'{"seed": "7"}', 400, "seed must be an integer"),
        ("POST", "/scene/next", b'{"seed": -1}', 400, "seed must be an integer"),
        ("POST", "/scene/next", b'{"sead": 1}', 400, "body must be a JSON object"),
        ("POST", "/scene/next", b"[1]", 400, "body must be a JSON object"),
        ("POST", "/scene/next", b"[" * 4000, 400, "more than 8 deep"),
        ("POST", "/scene/next", b'{"a": ' * 9 + b"1" + b"}" * 9, 400, "more than 8 deep"),
        ("POST", "/scene/next?seed=x", None, 400, "seed must be an integer"),
        ("POST", "/scene/next?color=red", None, 400, "unknown or repeated query"),
        ("POST", "/elsewhere", None, 404, "no such resource"),
        ("GET", "/front.mjpg", None, 404, "/top.mjpg"),
    ],
)
def test_bad_requests_are_refused_and_the_server_keeps_serving(
    served: Workcell, method: str, path: str, body: bytes | None, status: int, needle: str
) -> None:
    port = _port(served)
    got, data = _request(port, method, path, body)
    assert got == status
    assert needle in data["error"]
    assert _request(port, "GET", "/scene/truth")[0] == 200


def test_oversized_body_is_refused(served: Workcell) -> None:
    with socket.create_connection(("127.0.0.1", _port(served)), timeout=5) as s:
        s.sendall(b"POST /scene/next HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
        reply = b""
        while chunk := s.recv(4096):
            reply += chunk
    assert b" 400 " in reply.split(b"\r\n", 1)[0] and b"max 4096" in reply


def test_a_client_that_vanishes_does_not_stop_the_stream(served: Workcell) -> None:
    port = _port(served)
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"GET /top.mjpg HTTP/1.1\r\nHost: x\r\n\r\n")
    s.recv(1000)
    s.close()  # mid-stream
    _, parts = _read_parts(port, "/top.mjpg", 2)
    assert len(parts) == 2


def test_start_workcell_builds_urls_and_closes(arm_factory=None) -> None:
    from mecharm.sim.arm import SimArm, SimArmConfig

    arm = SimArm(SimArmConfig(time_scale=20))
    wc = start_workcell(
        arm,
        "standard",
        seed=1,
        camera_port=0,
        config=WorkcellConfig(top_fps=5, side_fps=5, top_size=(640, 360), side_size=(320, 180)),
    )
    try:
        port = _port(wc)
        assert wc.urls == {
            "top": f"http://127.0.0.1:{port}/top.mjpg",
            "side": f"http://127.0.0.1:{port}/side.mjpg",
        }
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/top.jpg")
        r = conn.getresponse()
        img = cv2.imdecode(np.frombuffer(r.read(), np.uint8), cv2.IMREAD_COLOR)
        assert img.shape == (360, 640, 3)
        conn.close()
    finally:
        wc.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_port_in_use_fails_cleanly() -> None:
    from mecharm.sim.arm import SimArm

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        with pytest.raises(OSError):
            start_workcell(SimArm(), "random", seed=1, camera_port=s.getsockname()[1])


def test_perception_through_the_stream_matches_truth(served: Workcell) -> None:
    """The runtime's path end to end: MJPEG (JPEG-compressed) frames -> homography -> detection."""
    from mecharm.runtime.perception import detect_scene, estimate_homography

    cam = open_camera(served.urls["top"])
    try:
        frames = [f.image for f in _good_frames(cam, 4)]
    finally:
        cam.close()
    H = estimate_homography(frames[:2])
    scene = detect_scene(frames[2:], H)
    t = served.truth()
    assert scene.block is not None and scene.box.method == "contour"
    assert math.hypot(scene.block.x - t["block"]["x"], scene.block.z - t["block"]["z"]) < 0.002
    assert math.hypot(scene.box.x - t["box"]["x"], scene.box.z - t["box"]["z"]) < 0.002


def test_fuzzed_scene_requests_never_break_the_server(served: Workcell) -> None:
    rng = np.random.default_rng(1)
    port = _port(served)
    samples = [
        b"",
        b"{}",
        b"null",
        b'{"seed": 1.5}',
        b'{"seed": true}',
        b'{"seed": 99999999999}',
        b"\xff\xfe",
    ]
    samples += [bytes(rng.integers(0, 256, int(rng.integers(1, 200))).tolist()) for _ in range(25)]
    for body in samples:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("POST", "/scene/next", body=body)
        resp = conn.getresponse()
        assert resp.status in (200, 400), (body, resp.status)
        json.loads(resp.read())
        conn.close()
    assert _request(port, "GET", "/scene/truth")[0] == 200


def test_json_depth_counts_brackets_outside_strings_only() -> None:
    assert json_depth(b'{"seed": 3}', 8) == 1
    assert json_depth(b'{"a": [[1], {"b": [2]}]}', 8) == 4
    assert json_depth(b'{"s": "[[[[[[[[[[[[\\"]]]]"}', 8) == 1  # in a string, escaped quote
    assert json_depth(b"[" * 4000, 8) == 9  # stops counting past the limit
    assert json_depth(b"", 8) == 0


def test_server_limits_are_validated() -> None:
    for bad in ({"max_connections": 0}, {"idle_timeout_s": 0.0}, {"max_body_bytes": -1}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            CameraServer(("127.0.0.1", 0), {}, dict, lambda _s: {}, **bad)  # type: ignore[arg-type]
