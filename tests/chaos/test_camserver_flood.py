"""The sim camera server under 300 idle connections and a request flood (docs/workcell.md,
"Limits"): its threads stay bounded, silent clients are dropped, hostile bodies get a
400, a legitimate client still gets a frame during and after, and nothing ends in a
traceback. Real sockets on 127.0.0.1; every loop is bounded in count and time."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np
import pytest
from structlog.testing import capture_logs

from mecharm.sim.arm import SimArm, SimArmConfig
from mecharm.sim.camserver import CameraServer
from mecharm.sim.workcell import Workcell, WorkcellConfig, start_workcell

MAX_CONNECTIONS = 16
IDLE_TIMEOUT_S = 2.0
IDLE_CLIENTS = 300
FLOOD_REQUESTS = 400
FLOOD_WORKERS = 8  # fewer than MAX_CONNECTIONS: the flood itself is never refused


def handler_threads() -> int:
    """Threads serving a connection (``Thread-N (process_request_thread)``)."""
    return sum("process_request_thread" in t.name for t in threading.enumerate())


def poll(cond: Callable[[], bool], what: str, limit_s: float = 30.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"never reached within {limit_s} s: {what}")


@pytest.fixture
def workcell() -> Iterator[Workcell]:
    config = WorkcellConfig(
        top_size=(320, 180),
        side_size=(320, 180),
        top_fps=10,
        max_connections=MAX_CONNECTIONS,
        idle_timeout_s=IDLE_TIMEOUT_S,
    )
    wc = start_workcell(SimArm(SimArmConfig(time_scale=20)), "standard", 1, camera_port=0,
                        config=config)  # fmt: skip
    try:
        yield wc
    finally:
        wc.close()


def request(
    port: int, method: str, path: str, body: bytes | None = None
) -> tuple[int | str, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body)
        resp = conn.getresponse()
        return resp.status, resp.read()
    except (OSError, http.client.HTTPException) as exc:
        return type(exc).__name__, b""
    finally:
        conn.close()


def legit_frame(port: int, attempts: int = 20) -> tuple[np.ndarray, int]:
    """A frame as a client that retries a refused request would get it (bounded)."""
    for i in range(attempts):
        status, data = request(port, "GET", "/top.jpg")
        if status == 200:
            img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
            assert img is not None and img.shape == (180, 320, 3)
            return img, i + 1
        time.sleep(0.2)
    raise AssertionError(f"no frame in {attempts} attempts (last status {status})")


def test_idle_connections_and_a_flood_keep_threads_bounded_and_serve_a_frame(
    workcell: Workcell, capfd: pytest.CaptureFixture[str]
) -> None:
    server = workcell.server
    assert isinstance(server, CameraServer)
    port = server.port
    idle: list[socket.socket] = []
    peak = 0
    with capture_logs() as logs:
        try:
            # 1. 300 clients that connect and send nothing
            for _ in range(IDLE_CLIENTS):
                idle.append(socket.create_connection(("127.0.0.1", port), timeout=10))
                peak = max(peak, handler_threads())
            poll(lambda: server.connections <= MAX_CONNECTIONS, "at most the limit open")
            peak = max(peak, handler_threads())
            assert peak <= MAX_CONNECTIONS, peak
            assert server.evicted > 0  # the oldest idle made room (others timed out meanwhile)
            # a legitimate client during the idle flood
            _, tries_during_idle = legit_frame(port)

            # 2. a flood: frames, truth, a 4,000-deep JSON body, a wrong path, a good scene
            deep = b"[" * 4000
            kinds: list[tuple[str, str, bytes | None]] = [
                ("GET", "/top.jpg", None),
                ("GET", "/scene/truth", None),
                ("POST", "/scene/next", deep),
                ("GET", "/nowhere", None),
                ("POST", "/scene/next", b'{"seed": 5}'),
            ]
            stop = threading.Event()
            samples: list[int] = []

            def sample() -> None:
                while not stop.is_set():
                    samples.append(handler_threads())
                    time.sleep(0.02)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            legit: list[int] = []
            with ThreadPoolExecutor(FLOOD_WORKERS) as pool:
                futures = [
                    pool.submit(request, port, *kinds[i % len(kinds)])
                    for i in range(FLOOD_REQUESTS)
                ]
                legit.append(legit_frame(port)[1])  # during the flood
                results = [(kinds[i % len(kinds)][1], f.result()) for i, f in enumerate(futures)]
            stop.set()
            sampler.join(timeout=5)
            statuses = Counter((path, status) for path, (status, _) in results)
            assert set(statuses) == {
                ("/top.jpg", 200),
                ("/scene/truth", 200),
                ("/scene/next", 400),
                ("/nowhere", 404),
                ("/scene/next", 200),
            }, statuses
            deep_replies = [
                body for path, (st, body) in results if path == "/scene/next" and st == 400
            ]
            assert all(b"more than 8 deep" in b for b in deep_replies)
            assert max(samples) <= MAX_CONNECTIONS, max(samples)

            # 3. silent clients are dropped; the threads go back to what the server needs
            poll(lambda: handler_threads() == 0, "idle connections dropped", 10 * IDLE_TIMEOUT_S)
            closed = 0
            for s in idle:
                s.settimeout(10)
                try:
                    closed += s.recv(1) == b""
                except OSError:
                    closed += 1
            assert closed == IDLE_CLIENTS
            _, tries_after = legit_frame(port)
        finally:
            for s in idle:
                s.close()
    errors = [e for e in logs if e["log_level"] == "error"]
    assert errors == [] and server.handler_errors == 0
    out = capfd.readouterr()
    assert "Traceback" not in out.err + out.out
    print(
        f"\nchaos: {IDLE_CLIENTS} idle connections: handler threads peak {peak} "
        f"(limit {MAX_CONNECTIONS}), evicted {server.evicted}, refused {server.refused}; "
        f"flood of {FLOOD_REQUESTS}: handler threads peak {max(samples)}, {dict(statuses)}; "
        f"legit frame tries: during idle {tries_during_idle}, during flood {legit[0]}, "
        f"after {tries_after}"
    )


def test_when_every_connection_is_busy_a_newcomer_gets_503_at_once(workcell: Workcell) -> None:
    server = workcell.server
    assert isinstance(server, CameraServer)
    port = server.port
    streams: list[http.client.HTTPResponse] = []
    conns: list[http.client.HTTPConnection] = []
    try:
        for _ in range(MAX_CONNECTIONS):  # every slot streams: none is idle
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            c.request("GET", "/top.mjpg")
            streams.append(c.getresponse())
            conns.append(c)
        poll(lambda: server.connections == MAX_CONNECTIONS, "all slots streaming")
        status, body = request(port, "GET", "/scene/truth")
        assert status == 503 and b"server busy" in body
        assert server.refused >= 1 and handler_threads() <= MAX_CONNECTIONS
    finally:
        for r in streams:
            r.close()
        for c in conns:
            c.close()
    poll(lambda: server.connections == 0, "streams closed")
    assert request(port, "GET", "/scene/truth")[0] == 200


def _raw(port: int, data: bytes, wait_s: float = 20.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as s:
        s.sendall(data)
        reply = b""
        while chunk := s.recv(4096):
            reply += chunk
    return reply


@pytest.mark.parametrize(
    ("data", "status", "needle"),
    [
        (b"POST /scene/next HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"se", b"408",
         b"not received within"),
        (b"POST /scene/next HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", b"411",
         b"Content-Length"),
        (b"POST /scene/next HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\n" + b"{" * 9, b"400",
         b"more than 8 deep"),
        (b"POST /scene/next HTTP/1.1\r\nHost: x\r\nContent-Length: 39\r\n\r\n"
         b'{"seed": "[[[[[[[[[[[[[[[[[[[[[[[[[[["}', b"400", b"seed must be an integer"),
    ],
    ids=["trickled-body", "chunked", "deep", "brackets-inside-a-string"],
)  # fmt: skip
def test_hostile_bodies_get_a_4xx_naming_the_problem(
    workcell: Workcell, data: bytes, status: bytes, needle: bytes
) -> None:
    server = workcell.server
    assert isinstance(server, CameraServer)
    reply = _raw(server.port, data)
    assert reply.split(b"\r\n", 1)[0].split()[1] == status, reply[:200]
    assert needle in reply
    assert server.handler_errors == 0
    assert request(server.port, "GET", "/scene/truth")[0] == 200


def test_a_client_that_sends_nothing_is_dropped(workcell: Workcell) -> None:
    server = workcell.server
    assert isinstance(server, CameraServer)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10 * IDLE_TIMEOUT_S) as s:
        assert s.recv(1) == b""  # closed by the server, not by this socket's timeout
    poll(lambda: server.connections == 0, "connection released")
