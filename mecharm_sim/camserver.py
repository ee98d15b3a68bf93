"""MJPEG-over-HTTP server for the simulated cameras (and the sim-only scene endpoints).

Routes (loopback by default):

* ``GET /top.mjpg``, ``GET /side.mjpg`` — ``multipart/x-mixed-replace; boundary=frame``,
  each part ``Content-Type: image/jpeg`` + ``Content-Length``; what
  ``mecharm_cameras.open_camera("http://...")`` reads, like an IP camera.
* ``GET /top.jpg``, ``GET /side.jpg`` — one fresh frame.
* ``GET /scene/truth`` — the scene's ground truth as JSON (tests only).
* ``POST /scene/next`` — lay out the next trial's scene; optional JSON body
  ``{"seed": int}`` or query ``?seed=N`` (the operator putting the block back; tests only).

Rendering is lazy: a camera's producer thread runs only while at least one
client streams it, paced at the camera's fps; all clients share its frames
(a slow client skips frames rather than slowing the others).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from mecharm_common.logging import get_logger

__all__ = ["MAX_BODY_BYTES", "CameraFeed", "CameraServer"]

log = get_logger("mecharm_sim.camserver")

MAX_BODY_BYTES = 4096
_BOUNDARY = "frame"


class CameraFeed:
    """One camera: renders JPEG frames at ``fps`` while someone watches, shares the newest."""

    def __init__(self, name: str, produce: Callable[[], bytes], fps: float) -> None:
        if fps <= 0:
            raise ValueError(f"camera {name}: fps must be > 0, got {fps}")
        self.name = name
        self.produce = produce
        self.fps = float(fps)
        self._cond = threading.Condition()
        self._clients = 0
        self._seq = 0
        self._jpeg = b""
        self._ts = 0.0
        self._thread: threading.Thread | None = None
        self._closed = False
        self.frames_rendered = 0
        self.render_errors = 0

    def attach(self) -> None:
        with self._cond:
            if self._closed:
                raise RuntimeError(f"camera {self.name} is closed")
            self._clients += 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name=f"cam-{self.name}", daemon=True
                )
                self._thread.start()

    def detach(self) -> None:
        with self._cond:
            self._clients = max(0, self._clients - 1)
            self._cond.notify_all()

    @property
    def clients(self) -> int:
        return self._clients

    def wait_frame(self, after_seq: int, timeout: float) -> tuple[int, bytes, float] | None:
        """Block until a frame newer than ``after_seq`` exists; None on timeout or close."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._seq <= after_seq and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)
            if self._closed:
                return None
            return self._seq, self._jpeg, self._ts

    def _run(self) -> None:
        period = 1.0 / self.fps
        next_t = time.monotonic()
        log.info("camera_producer_start", camera=self.name, fps=self.fps)
        while True:
            with self._cond:
                if self._closed or self._clients == 0:
                    self._thread = None
                    break
            ts = time.time()
            try:
                jpeg = self.produce()
            except Exception as exc:  # keep serving; a broken frame is logged and skipped
                self.render_errors += 1
                log.error(
                    "camera_render_failed", camera=self.name, error=f"{type(exc).__name__}: {exc}"
                )
                jpeg = b""
            if jpeg:
                with self._cond:
                    self._seq += 1
                    self._jpeg, self._ts = jpeg, ts
                    self.frames_rendered += 1
                    self._cond.notify_all()
            next_t += period
            delay = next_t - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                next_t = time.monotonic()  # fell behind: do not try to catch up in a burst
        log.info("camera_producer_stop", camera=self.name, frames=self.frames_rendered)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            t = self._thread
        if t is not None:
            t.join(timeout=2.0)


class _Handler(BaseHTTPRequestHandler):
    server: CameraServer
    protocol_version = "HTTP/1.1"

    def log_message(
        self, format: str, *args: Any
    ) -> None:  # route http.server's access log to structlog
        log.debug("camserver_http", client=self.client_address[0], msg=format % args)

    def _json(self, status: int, obj: Any) -> None:
        body = (json.dumps(obj, default=str) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str) -> None:
        log.warning(
            "camserver_bad_request", path=self.path[:200], status=int(status), error=message
        )
        self.close_connection = True  # an unread body must not be taken for the next request
        self._json(status, {"error": message})

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        feeds = self.server.feeds
        if path.endswith(".mjpg") and path[1:-5] in feeds:
            self._stream(feeds[path[1:-5]])
        elif path.endswith(".jpg") and path[1:-4] in feeds:
            jpeg = feeds[path[1:-4]].produce()
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "image/jpeg")
            self.send_header("Content-Length", str(len(jpeg)))
            self.end_headers()
            self.wfile.write(jpeg)
        elif path == "/scene/truth":
            self._json(HTTPStatus.OK, self.server.truth())
        else:
            self._error(
                HTTPStatus.NOT_FOUND,
                f"no such resource {path[:100]!r}; cameras: "
                f"{sorted('/' + n + '.mjpg' for n in feeds)}",
            )

    def do_POST(self) -> None:
        path, _, query = self.path.partition("?")
        if path != "/scene/next":
            self._error(HTTPStatus.NOT_FOUND, f"no such resource {path[:100]!r} (POST /scene/next)")
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self._error(HTTPStatus.BAD_REQUEST, "Content-Length is not an integer")
            return
        if length < 0 or length > MAX_BODY_BYTES:
            self._error(HTTPStatus.BAD_REQUEST, f"body of {length} bytes (max {MAX_BODY_BYTES})")
            return
        raw = self.rfile.read(length) if length else b""
        seed: Any = None
        params = urllib.parse.parse_qs(query, keep_blank_values=True)
        if set(params) - {"seed"} or len(params.get("seed", [])) > 1:
            self._error(
                HTTPStatus.BAD_REQUEST,
                f"unknown or repeated query parameters {sorted(params)} (only seed=N)",
            )
            return
        if "seed" in params:
            try:
                seed = int(params["seed"][0])
            except ValueError:
                self._error(
                    HTTPStatus.BAD_REQUEST,
                    f"seed must be an integer, got {params['seed'][0][:30]!r}",
                )
                return
        if raw.strip():
            try:
                body = json.loads(raw)
            except (ValueError, UnicodeDecodeError) as exc:
                self._error(HTTPStatus.BAD_REQUEST, f"body is not valid JSON: {exc}")
                return
            if not isinstance(body, dict) or set(body) - {"seed"}:
                self._error(
                    HTTPStatus.BAD_REQUEST,
                    'body must be a JSON object {"seed": int} (seed optional)',
                )
                return
            seed = body.get("seed", seed)
        if seed is not None and (
            isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**31
        ):
            self._error(
                HTTPStatus.BAD_REQUEST, f"seed must be an integer in 0..2^31-1, got {seed!r}"
            )
            return
        self._json(HTTPStatus.OK, self.server.next_scene(seed))

    def _stream(self, feed: CameraFeed) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", f"multipart/x-mixed-replace; boundary={_BOUNDARY}")
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        feed.attach()
        seq = 0
        try:
            while not self.server.closing:
                got = feed.wait_frame(seq, timeout=1.0)
                if got is None:
                    continue
                seq, jpeg, ts = got
                head = (
                    f"--{_BOUNDARY}\r\nContent-Type: image/jpeg\r\nContent-Length: {len(jpeg)}\r\n"
                    f"X-Timestamp: {ts:.6f}\r\n\r\n"
                ).encode()
                self.wfile.write(head + jpeg + b"\r\n")
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            pass  # the client went away
        finally:
            feed.detach()


class CameraServer(ThreadingHTTPServer):
    """HTTP server for the feeds; ``serve_in_thread`` / ``close``."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        feeds: dict[str, CameraFeed],
        truth: Callable[[], dict[str, Any]],
        next_scene: Callable[[int | None], dict[str, Any]],
    ) -> None:
        super().__init__(address, _Handler)
        self.feeds = feeds
        self.truth = truth
        self.next_scene = next_scene
        self.closing = False
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def serve_in_thread(self) -> None:
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.2}, name="camserver", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self.closing = True
        for feed in self.feeds.values():
            feed.close()
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
