"""MJPEG-over-HTTP server for the simulated cameras (and the sim-only scene endpoints).

Routes (loopback by default):

* ``GET /top.mjpg``, ``GET /side.mjpg`` — ``multipart/x-mixed-replace; boundary=frame``,
  each part ``Content-Type: image/jpeg`` + ``Content-Length``; what
  ``mecharm.cameras.open_camera("http://...")`` reads, like an IP camera.
* ``GET /top.jpg``, ``GET /side.jpg`` — one fresh frame.
* ``GET /scene/truth`` — the scene's ground truth as JSON (tests only).
* ``POST /scene/next`` — lay out the next trial's scene; optional JSON body
  ``{"seed": int}`` or query ``?seed=N`` (the operator putting the block back; tests only).
* ``POST /arm/drag`` — JSON body ``{"angles": [six degrees]}``: a hand moves the arm,
  whose servos must be released (a drag-teach leader; 409 while they are powered, 400 for
  bad angles; tests and the simulated leader only).
* ``GET /faults`` — what is armed and what took effect; ``POST /faults`` with a JSON
  body ``{"fault": NAME, ...parameters}`` arms one fault (400 naming what is wrong and
  listing the valid faults or parameters); ``DELETE /faults`` disarms them all
  (docs/simulation-faults.md; only when the server was given a fault board).

Rendering is lazy: a camera's producer thread runs only while at least one
client streams it, paced at the camera's fps; all clients share its frames
(a slow client skips frames rather than slowing the others). ``/top.jpg`` takes
the next frame of the same producer, so a burst of requests costs one render per
frame period, not one per request.

Limits (docs/workcell.md, "Limits"): at most ``max_connections`` connections at a
time, each in its own thread; when all are taken, the connection that has waited
longest without sending a request is dropped for the newcomer, and when none is
idle the newcomer gets a 503 at once. A connection that sends nothing for
``idle_timeout_s`` is closed; a request body is at most ``max_body_bytes`` and must
arrive within ``idle_timeout_s``; a JSON body nested deeper than ``MAX_JSON_DEPTH``
gets a 400. Whatever a handler meets, it answers (a 4xx/5xx JSON naming the
problem) and logs one line; the server never prints a traceback and keeps serving.

One concern: the simulated cameras' HTTP surface; each route is short, and they share the
producers and the scene lock.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from mecharm.common.logging import get_logger

if TYPE_CHECKING:
    from mecharm.sim.faults import FaultBoard

__all__ = [
    "DEFAULT_IDLE_TIMEOUT_S",
    "DEFAULT_MAX_CONNECTIONS",
    "MAX_BODY_BYTES",
    "MAX_JSON_DEPTH",
    "CameraFeed",
    "CameraServer",
    "json_depth",
]

log = get_logger("mecharm.sim.camserver")

MAX_BODY_BYTES = 4096
#: The bodies the server takes are ``{"seed": N}`` and a fault (depth 2); this leaves room
#: and refuses a body that would drive the JSON parser toward the recursion limit.
MAX_JSON_DEPTH = 8
#: Two streams (runtime, recorder) plus a few scene requests and tests need far fewer.
DEFAULT_MAX_CONNECTIONS = 32
DEFAULT_IDLE_TIMEOUT_S = 5.0
#: How long a ``/NAME.jpg`` request waits for the next frame of its camera.
JPEG_WAIT_S = 5.0
_BOUNDARY = "frame"


def json_depth(raw: bytes, limit: int) -> int:
    """Nesting depth of the arrays/objects in a JSON text, scanning at most until it
    exceeds ``limit`` (then ``limit + 1``); brackets inside strings do not count."""
    depth = deepest = 0
    in_string = escaped = False
    for b in raw:
        if in_string:
            if escaped:
                escaped = False
            elif b == 0x5C:  # backslash
                escaped = True
            elif b == 0x22:  # quote
                in_string = False
        elif b == 0x22:
            in_string = True
        elif b in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        elif b in (0x5D, 0x7D):  # ] }
            depth -= 1
    return deepest


class CameraFeed:
    """One camera: renders JPEG frames at ``fps`` while someone watches, shares the newest.

    ``first_frame_s`` (real seconds): a client that opens the camera (a stream, or one
    ``/NAME.jpg``) gets no frame before that long, as a real camera delivers its first
    frame a while after it is opened (docs/simulation-timing.md). A client that keeps
    its stream open pays it once."""

    def __init__(
        self, name: str, produce: Callable[[], bytes], fps: float, first_frame_s: float = 0.0
    ) -> None:
        if fps <= 0:
            raise ValueError(f"camera {name}: fps must be > 0, got {fps}")
        if not first_frame_s >= 0:
            raise ValueError(f"camera {name}: first_frame_s must be >= 0, got {first_frame_s}")
        self.name = name
        self.produce = produce
        self.fps = float(fps)
        self.first_frame_s = float(first_frame_s)
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
        """A client opens the camera; returns once the camera would deliver its first frame."""
        with self._cond:
            if self._closed:
                raise RuntimeError(f"camera {self.name} is closed")
            self._clients += 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name=f"cam-{self.name}", daemon=True
                )
                self._thread.start()
            if self.first_frame_s > 0:  # the camera opening for this client; close() ends it
                self._cond.wait_for(lambda: self._closed, timeout=self.first_frame_s)

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

    def next_frame(self, timeout: float) -> tuple[int, bytes, float] | None:
        """The first frame rendered after this call (the producer runs while we wait);
        None on timeout or close. Concurrent callers share one render."""
        with self._cond:
            seq = self._seq
        self.attach()
        if self.first_frame_s > 0:
            with self._cond:
                seq = self._seq  # after the opening: the first frame the opened camera delivers
        try:
            return self.wait_frame(seq, timeout)
        finally:
            self.detach()

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
    _started = False  # a response's status line has been sent on this request

    def log_message(
        self, format: str, *args: Any
    ) -> None:  # route http.server's access log to structlog
        log.debug("camserver_http", client=self.client_address[0], msg=format % args)

    def setup(self) -> None:
        super().setup()
        # per read and write: a client that sends (or takes) nothing this long is dropped
        self.connection.settimeout(self.server.idle_timeout_s)

    def handle_one_request(self) -> None:
        self._started = False
        self.server._mark(self.connection, idle=True)  # waiting for a request: may be evicted
        super().handle_one_request()

    def parse_request(self) -> bool:
        ok = super().parse_request()
        self.server._mark(self.connection, idle=False)  # request line and headers are in
        return ok

    def handle(self) -> None:
        """One line and an answer for whatever happens; never a traceback."""
        try:
            super().handle()
        except (ConnectionError, TimeoutError, OSError) as exc:  # gone, silent or too slow
            log.debug("camserver_connection_dropped", error=f"{type(exc).__name__}: {exc}")
        except Exception as exc:
            self.server._count("handler_errors")
            log.error(
                "camserver_handler_failed",
                path=str(getattr(self, "path", ""))[:200],
                error=f"{type(exc).__name__}: {exc}"[:300],
            )
            if not self._started:
                with contextlib.suppress(OSError):
                    self.close_connection = True
                    self._json(
                        HTTPStatus.INTERNAL_SERVER_ERROR,
                        {
                            "error": f"internal error: {type(exc).__name__}; the server keeps serving"
                        },
                    )

    def send_response(self, code: int, message: str | None = None) -> None:
        self._started = True
        super().send_response(code, message)

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

    def _read_body(self, length: int) -> bytes | None:
        """``length`` bytes, all within ``idle_timeout_s`` (a client that trickles its body
        holds a thread no longer than a silent one); None, answered, when they do not come."""
        budget = self.server.idle_timeout_s
        deadline = time.monotonic() + budget
        chunks: list[bytes] = []
        got = 0
        try:
            while got < length:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                self.connection.settimeout(left)
                chunk = self.rfile.read1(length - got)
                if not chunk:
                    self._error(
                        HTTPStatus.BAD_REQUEST,
                        f"body ended after {got} of the {length} bytes Content-Length announced",
                    )
                    return None
                chunks.append(chunk)
                got += len(chunk)
        except TimeoutError:
            self._error(
                HTTPStatus.REQUEST_TIMEOUT,
                f"body not received within {budget:g} s ({got} of {length} bytes)",
            )
            return None
        finally:
            self.connection.settimeout(budget)
        return b"".join(chunks)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        feeds = self.server.feeds
        if path.endswith(".mjpg") and path[1:-5] in feeds:
            self._stream(feeds[path[1:-5]])
        elif path.endswith(".jpg") and path[1:-4] in feeds:
            if self._camera_lost(path[1:-4]):
                return
            got = feeds[path[1:-4]].next_frame(JPEG_WAIT_S)
            if got is None:
                self._error(
                    HTTPStatus.SERVICE_UNAVAILABLE,
                    f"no frame of camera {path[1:-4]} within {JPEG_WAIT_S:g} s; retry",
                )
                return
            jpeg = got[1]
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "image/jpeg")
            self.send_header("Content-Length", str(len(jpeg)))
            self.end_headers()
            self.wfile.write(jpeg)
        elif path == "/scene/truth":
            self._json(HTTPStatus.OK, self.server.truth())
        elif path == "/faults" and self.server.faults is not None:
            self._json(HTTPStatus.OK, self.server.faults.status())
        else:
            self._error(
                HTTPStatus.NOT_FOUND,
                f"no such resource {path[:100]!r}; cameras: "
                f"{sorted('/' + n + '.mjpg' for n in feeds)}",
            )

    def _body(self) -> tuple[bool, Any]:
        """The request's JSON body (None when empty) within the server's limits; (False, None)
        when it was refused (already answered)."""
        if self.headers.get("Transfer-Encoding"):
            self._error(
                HTTPStatus.LENGTH_REQUIRED,
                "send the body with Content-Length (no Transfer-Encoding)",
            )
            return False, None
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self._error(HTTPStatus.BAD_REQUEST, "Content-Length is not an integer")
            return False, None
        limit = self.server.max_body_bytes
        if length < 0 or length > limit:
            self._error(HTTPStatus.BAD_REQUEST, f"body of {length} bytes (max {limit})")
            return False, None
        raw = self._read_body(length) if length else b""
        if raw is None:
            return False, None
        if not raw.strip():
            return True, None
        depth = json_depth(raw, MAX_JSON_DEPTH)
        if depth > MAX_JSON_DEPTH:
            self._error(
                HTTPStatus.BAD_REQUEST,
                f"body nests arrays/objects more than {MAX_JSON_DEPTH} deep; send a JSON object",
            )
            return False, None
        try:
            return True, json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            self._error(HTTPStatus.BAD_REQUEST, f"body is not valid JSON: {exc}"[:300])
            return False, None

    def do_POST(self) -> None:
        path, _, query = self.path.partition("?")
        if path == "/faults" and self.server.faults is not None:
            self._post_fault(query)
            return
        if path == "/arm/drag" and self.server.drag is not None:
            self._post_drag(query)
            return
        if path != "/scene/next":
            self._error(
                HTTPStatus.NOT_FOUND,
                f"no such resource {path[:100]!r} (POST /scene/next"
                + (", POST /faults" if self.server.faults is not None else "")
                + (", POST /arm/drag" if self.server.drag is not None else "")
                + ")",
            )
            return
        ok, body = self._body()
        if not ok:
            return
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
        if body is not None:
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

    def _post_drag(self, query: str) -> None:
        """Move the limp arm to ``{"angles": [...]}``; 409 while its servos hold it."""
        from mecharm.sim.arm import SimArmDataError

        assert self.server.drag is not None
        if query:
            self._error(HTTPStatus.BAD_REQUEST, "POST /arm/drag takes no query; send a JSON body")
            return
        ok, body = self._body()
        if not ok:
            return
        angles = body.get("angles") if isinstance(body, dict) and set(body) == {"angles"} else None
        if not isinstance(angles, list) or not all(
            isinstance(a, int | float) and not isinstance(a, bool) for a in angles
        ):
            self._error(
                HTTPStatus.BAD_REQUEST, 'body must be a JSON object {"angles": [six numbers]}'
            )
            return
        try:
            pose = self.server.drag(angles)
        except SimArmDataError as exc:
            status = HTTPStatus.CONFLICT if "powered" in str(exc) else HTTPStatus.BAD_REQUEST
            self._error(status, str(exc)[:300])
            return
        self._json(HTTPStatus.OK, {"angles": list(pose)})

    def _post_fault(self, query: str) -> None:
        """Arm one fault from ``{"fault": NAME, ...}``; 400 naming what is wrong."""
        from mecharm.sim.faults import FaultError

        board = self.server.faults
        assert board is not None
        if query:
            self._error(HTTPStatus.BAD_REQUEST, "POST /faults takes no query; send a JSON body")
            return
        ok, body = self._body()
        if not ok:
            return
        try:
            armed = board.arm(body)
        except FaultError as exc:
            self._error(HTTPStatus.BAD_REQUEST, str(exc)[:600])
            return
        self._json(HTTPStatus.OK, {"armed": armed})

    def do_DELETE(self) -> None:
        path = self.path.split("?", 1)[0]
        if path != "/faults" or self.server.faults is None:
            self._error(HTTPStatus.NOT_FOUND, f"no such resource {path[:100]!r} (DELETE /faults)")
            return
        self._json(HTTPStatus.OK, {"cleared": True, **self.server.faults.clear()})

    def _camera_lost(self, name: str) -> bool:
        """A ``camera_lost`` fault is armed on ``name``: answered 503 (docs/simulation-faults.md)."""
        faults = self.server.faults
        if faults is None or not faults.cameras.lost(name):
            return False
        faults.cameras.refused(name)
        self._error(HTTPStatus.SERVICE_UNAVAILABLE, f"camera {name} lost (fault camera_lost)")
        return True

    def _stream(self, feed: CameraFeed) -> None:
        if self._camera_lost(feed.name):
            return
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", f"multipart/x-mixed-replace; boundary={_BOUNDARY}")
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        feed.attach()
        seq = 0
        faults = self.server.faults
        try:
            while not self.server.closing:
                if faults is not None and faults.cameras.lost(feed.name):
                    log.info("camserver_stream_cut", camera=feed.name, why="fault camera_lost")
                    break  # the camera is gone: the stream ends as a dead device's would
                got = feed.wait_frame(seq, timeout=0.2 if faults is not None else 1.0)
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
    """HTTP server for the feeds; ``serve_in_thread`` / ``close``.

    One thread per connection, at most ``max_connections`` of them (docs/workcell.md,
    "Limits"); counters ``refused``, ``evicted`` and ``handler_errors`` say what the
    limits did."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # a burst of connects is accepted (and judged) at once

    def __init__(
        self,
        address: tuple[str, int],
        feeds: dict[str, CameraFeed],
        truth: Callable[[], dict[str, Any]],
        next_scene: Callable[[int | None], dict[str, Any]],
        *,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        max_body_bytes: int = MAX_BODY_BYTES,
        faults: FaultBoard | None = None,
        drag: Callable[[list[float]], tuple[float, ...]] | None = None,
    ) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {max_connections}")
        if not idle_timeout_s > 0:
            raise ValueError(f"idle_timeout_s must be > 0, got {idle_timeout_s}")
        if max_body_bytes < 0:
            raise ValueError(f"max_body_bytes must be >= 0, got {max_body_bytes}")
        super().__init__(address, _Handler)
        self.feeds = feeds
        self.truth = truth
        self.next_scene = next_scene
        self.faults = faults  # the sim's fault board: /faults routes exist only with one
        self.drag = drag  # moves a released arm by hand: POST /arm/drag exists only with it
        self.max_connections = int(max_connections)
        self.idle_timeout_s = float(idle_timeout_s)
        self.max_body_bytes = int(max_body_bytes)
        self.closing = False
        self.refused = 0
        self.evicted = 0
        self.handler_errors = 0
        self._slots = threading.BoundedSemaphore(self.max_connections)
        self._lock = threading.Lock()
        #: open connections -> monotonic time since they wait for a request (None: busy)
        self._conns: dict[socket.socket, float | None] = {}
        self._last_refusal_log = -1.0
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._conns)

    def _count(self, name: str) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)

    def _mark(self, conn: socket.socket, *, idle: bool) -> None:
        with self._lock:
            if conn in self._conns:
                self._conns[conn] = time.monotonic() if idle else None

    def _evict_oldest_idle(self) -> bool:
        """Drop the connection that has waited longest without a request; False if none."""
        with self._lock:
            idle = [(t, c) for c, t in self._conns.items() if t is not None]
            if not idle:
                return False
            _, victim = min(idle, key=lambda tc: tc[0])
            self._conns[victim] = None  # not chosen twice
            self.evicted += 1
        with contextlib.suppress(OSError):
            victim.shutdown(socket.SHUT_RDWR)  # its handler reads EOF and ends
        log.debug("camserver_idle_evicted", evicted_total=self.evicted)
        return True

    def _refuse(self, request: socket.socket) -> None:
        """503 at once, from the accepting thread, without blocking on the client."""
        with self._lock:
            self.refused += 1
            refused, now = self.refused, time.monotonic()
            say = now - self._last_refusal_log >= 1.0
            if say:
                self._last_refusal_log = now
        body = (
            json.dumps(
                {
                    "error": f"server busy: {self.max_connections} connections open, "
                    "none idle; retry in a moment"
                }
            )
            + "\n"
        ).encode()
        head = (
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
        ).encode()
        try:
            request.setblocking(False)
            request.send(head + body)
        except OSError:
            pass
        self.shutdown_request(request)
        if say:  # at most one line a second, whatever the flood
            log.warning(
                "camserver_busy_refused",
                max_connections=self.max_connections,
                refused_total=refused,
            )

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False) and not (
            self._evict_oldest_idle() and self._slots.acquire(timeout=1.0)
        ):
            self._refuse(request)
            return
        with self._lock:
            self._conns[request] = time.monotonic()
        try:
            super().process_request(request, client_address)  # starts the connection's thread
        except Exception as exc:  # e.g. no thread could be started
            self._release(request)
            log.error("camserver_thread_failed", error=f"{type(exc).__name__}: {exc}")
            self.shutdown_request(request)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(request)

    def _release(self, request: Any) -> None:
        with self._lock:
            known = self._conns.pop(request, "gone") != "gone"
        if known:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """An exception outside a handler's own guard: one line, never a traceback."""
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            return
        self._count("handler_errors")
        log.error("camserver_request_failed", error=f"{type(exc).__name__}: {exc}"[:300])

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
        with self._lock:
            open_conns = list(self._conns)
        for conn in open_conns:  # idle keep-alive clients must not outlive the server
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=2.0)
