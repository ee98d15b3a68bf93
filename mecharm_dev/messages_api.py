"""A local stand-in for the vendor's Messages API (``POST /v1/messages``), for tests and the demo.

Why a server and not a mock: the VLM judge is tested at its true boundary, through
the vendor's SDK and a real socket, so request shapes, headers, status codes and
the SDK's error mapping are all exercised. It checks what the real API checks
that matters here (the key in ``x-api-key`` or ``Authorization: Bearer``,
``anthropic-version``, the JSON body, every image
block a base64 JPEG that decodes) and answers in the real response shapes.

What it answers is scripted: a default behaviour plus a queue of one-shot ones
(``POST /_control`` with ``{"default": B, "queue": [B, ...]}``; ``GET /_requests``
lists what it was sent, each with the status it answered: null for a hang or a close). A behaviour ``B`` is one of::

    {"answer": {"verdict": "yes", "confidence": 0.9, "reason": "..."}}   # the model's JSON
    {"text": "any raw text"}                                             # e.g. malformed
    {"status": 429, "retry_after": 1}  # 429 rate_limit_error, 529 overloaded_error, 500 api_error
    {"hang": 30}                       # no answer for that many seconds (past a client's timeout)
    {"close": true}                    # close the connection without a response
    {"refusal": true}                  # stop_reason "refusal", no text

Latency: the answers (not the scripted errors, hangs or closes) come after a delay drawn
from a ``JudgeLatency`` (``--latency rig``: the rig's VLM call times, docs/simulation-timing.md;
default none). The delay of each request is in ``GET /_requests`` as ``latency_s``.

A behaviour with an unknown key, a wrong type, a status outside 400..599 or a
negative hang is refused (400 naming it) and the old script is kept. Requests it
cannot parse (a bad or oversized Content-Length, a chunked body, JSON nested too
deep) get an error answer in the API's shape (400, or 413 over a 4 MiB body);
the server keeps serving.

Run: ``python -m mecharm_dev.messages_api --port 8089 --answer '{"verdict": "yes", ...}'``,
then point the runtime at it with ``ANTHROPIC_BASE_URL=http://127.0.0.1:8089``.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import math
import random
import threading
import time
import uuid
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import cv2
import numpy as np

from mecharm.common.logging import get_logger
from mecharm.sim.timing import TIMING_PROFILES, JudgeLatency

__all__ = ["MessagesApiServer", "main"]

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
log = get_logger("mecharm_dev.messages_api")
DEFAULT_ANSWER = {"verdict": "yes", "confidence": 0.9, "reason": "the block is where it should be"}
MAX_BODY = 4 * 1024 * 1024  # bytes; a judge request (3 small JPEGs) is far below, larger gets 413
_KINDS = ("answer", "text", "status", "hang", "close", "refusal")


def check_behaviour(b: Any) -> str:
    """What is wrong with a scripted behaviour ("" when nothing): checked before it is stored,
    so a bad script is refused at ``/_control`` instead of breaking every later request."""
    if not isinstance(b, dict):
        return f"a behaviour must be an object, got {b!r}"
    unknown = sorted(set(b) - {*_KINDS, "retry_after"})
    if unknown:
        return f"unknown key(s) {unknown}; known: {[*_KINDS, 'retry_after']}"
    kinds = [k for k in _KINDS if k in b]
    if len(kinds) > 1:
        return f"one of {list(_KINDS)} per behaviour, got {kinds}"
    if "status" in b:
        st = b["status"]
        if isinstance(st, bool) or not isinstance(st, int) or not 400 <= st <= 599:
            return f"status: must be an integer error status 400..599, got {st!r}"
    if "retry_after" in b:
        if "status" not in b:
            return "retry_after: only goes with a status"
        if not _non_negative(b["retry_after"]):
            return f"retry_after: must be a number >= 0, got {b['retry_after']!r}"
    if "hang" in b and not _non_negative(b["hang"]):
        return f"hang: must be a number of seconds >= 0, got {b['hang']!r}"
    if "text" in b and not isinstance(b["text"], str):
        return f"text: must be a string, got {b['text']!r}"
    for flag in ("close", "refusal"):
        if flag in b and b[flag] is not True:
            return f"{flag}: must be true, got {b[flag]!r}"
    return ""


def _non_negative(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


class MessagesApiServer:
    """The fake API on 127.0.0.1 (port 0: any free one); ``start()``/``stop()`` or a context manager."""

    def __init__(
        self,
        port: int = 0,
        api_key: str | None = None,
        host: str = "127.0.0.1",
        *,
        latency: JudgeLatency | None = None,
        seed: int = 0,
    ) -> None:
        self.api_key = api_key  # None: any non-empty key is accepted
        self.latency = latency or JudgeLatency()  # default: answers at once
        self._latency_rng = random.Random(seed)
        self.default: dict[str, Any] = {"answer": DEFAULT_ANSWER}
        self.queue: deque[dict[str, Any]] = deque()
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.httpd = ThreadingHTTPServer((host, port), _handler(self))
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, default: dict[str, Any] | None = None, *queue: dict[str, Any]) -> None:
        """Set the default behaviour and/or queue one-shot behaviours (used in order).

        Raises ValueError naming the first bad behaviour; then nothing is changed."""
        named = [] if default is None else [("default", default)]
        for where, b in [*named, *((f"queue.{i}", q) for i, q in enumerate(queue))]:
            problem = check_behaviour(b)
            if problem:
                raise ValueError(f"{where}: {problem}")
        with self.lock:
            if default is not None:
                self.default = default
            self.queue.extend(queue)

    def next_latency(self) -> float:
        """The delay before the next answer, in seconds (drawn in request order)."""
        with self.lock:
            return self.latency.draw(self._latency_rng)

    def next_behaviour(self) -> dict[str, Any]:
        with self.lock:
            return self.queue.popleft() if self.queue else self.default

    def start(self) -> MessagesApiServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="messages-api")
        self._thread.daemon = True
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()  # hanging handlers return at once
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> MessagesApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _check_request(srv: MessagesApiServer, headers: Any, body: bytes) -> tuple[int, str, Any]:
    """(status, error message, parsed body): 200 and "" when the request is what the API accepts."""
    # the key as x-api-key, or as a bearer token (what the SDK's 2.x line sends)
    bearer = str(headers.get("authorization") or "")
    key = headers.get("x-api-key") or (bearer[7:] if bearer.lower().startswith("bearer ") else "")
    if not key or (srv.api_key is not None and key != srv.api_key):
        return 401, "invalid x-api-key (or Authorization: Bearer) header", None
    if not headers.get("anthropic-version"):
        return 400, "anthropic-version: header is required", None
    try:
        req = _parse_json(body)
    except ValueError as exc:
        return 400, f"the request body is not valid JSON: {exc}", None
    if not isinstance(req, dict):
        return 400, "the request body must be an object", None
    if not isinstance(req.get("model"), str) or not req["model"]:
        return 400, "model: field required", None
    if not isinstance(req.get("max_tokens"), int) or req["max_tokens"] < 1:
        return 400, "max_tokens: field required (integer >= 1)", None
    msgs = req.get("messages")
    if not isinstance(msgs, list) or not msgs:
        return 400, "messages: at least one message is required", None
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            return 400, f"messages.{i}.role: must be user or assistant", None
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list) or not blocks:
            return 400, f"messages.{i}.content: must be a string or a list of blocks", None
        for j, b in enumerate(blocks):
            problem = _check_block(b)
            if problem:
                return 400, f"messages.{i}.content.{j}: {problem}", None
    return 200, "", req


def _parse_json(body: bytes) -> Any:
    """json.loads, with nesting too deep for the parser reported as a ValueError like any other."""
    try:
        return json.loads(body)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _check_block(b: Any) -> str:
    if not isinstance(b, dict):
        return "a content block must be an object"
    if b.get("type") == "text":
        return "" if isinstance(b.get("text"), str) else "text: field required"
    if b.get("type") != "image":
        return f"unsupported block type {b.get('type')!r}"
    src = b.get("source")
    if not isinstance(src, dict) or src.get("type") != "base64":
        return "image.source: must be a base64 source"
    if src.get("media_type") != "image/jpeg":
        return f"image.source.media_type: expected image/jpeg, got {src.get('media_type')!r}"
    try:
        raw = base64.b64decode(str(src.get("data", "")), validate=True)
    except (binascii.Error, ValueError):
        return "image.source.data: not valid base64"
    if not raw.startswith(b"\xff\xd8"):
        return "image.source.data: not a JPEG"
    img = cv2.imdecode(np.frombuffer(raw, np.uint8), cv2.IMREAD_COLOR)
    if img is None:
        return "image.source.data: the JPEG does not decode"
    return ""


def _answered(status: int, b: dict[str, Any]) -> int | None:
    """The status the client gets: None when the behaviour answers nothing (a hang, a close)."""
    if status != 200:
        return status
    if "hang" in b or "close" in b:
        return None
    return int(b.get("status", 200))


def _handler(srv: MessagesApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        answered = False  # per request: set by _send, so a late failure does not answer twice

        def log_message(self, format: str, *args: Any) -> None:
            return None

        def _send(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
            self.answered = True
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.send_header("request-id", f"req_{uuid.uuid4().hex[:24]}")
            if self.close_connection:
                self.send_header("connection", "close")
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
            kind = _ERROR_TYPES.get(status, "api_error")
            self._send(status, {"type": "error", "error": {"type": kind, "message": message}},
                       headers)  # fmt: skip

        def send_error(
            self, code: int, message: str | None = None, explain: str | None = None
        ) -> None:
            """The base class's own refusals (a garbled request line, headers too long, an
            unknown method) in the API's JSON shape instead of an HTML page."""
            self.close_connection = True
            self._error(code, message or explain or "the request could not be parsed")

        def _guarded(self, route: Any) -> None:
            """Run a route; an unforeseen failure is a 500 in the API's shape, never a dead socket."""
            self.answered = False
            try:
                route()
            except ConnectionError as exc:  # the client went away: nobody to answer
                log.info("messages_api_client_gone", path=self.path, error=repr(exc))
                self.close_connection = True
            except Exception as exc:  # the stand-in must keep serving whatever it is sent
                log.error("messages_api_handler_failed", path=self.path, error=repr(exc))
                self.close_connection = True
                if not self.answered:
                    self._error(500, f"the stand-in failed on this request: {exc!r}")

        def do_GET(self) -> None:
            self._guarded(self._get)

        def do_POST(self) -> None:
            self._guarded(self._post)

        def _not_allowed(self) -> None:
            self._guarded(lambda: self._error(405, f"method {self.command} is not allowed"))

        do_PUT = do_DELETE = do_PATCH = _not_allowed

        def _get(self) -> None:
            if self.path == "/_requests":
                with srv.lock:
                    self._send(200, list(srv.requests))
            else:
                self._error(404, f"no route {self.path}")

        def _read_body(self) -> bytes | None:
            """The body, or None after answering why it cannot be read. Then the connection is
            closed: with its framing unknown, the next request on it could not be found."""
            lengths = set(self.headers.get_all("content-length") or [])
            raw = lengths.pop().strip() if len(lengths) == 1 else ""
            problem = ""
            if self.headers.get("transfer-encoding"):
                problem = "Transfer-Encoding is not supported: send the body with a Content-Length"
            elif lengths:
                problem = "Content-Length: conflicting values"
            elif raw and not (raw.isascii() and raw.isdigit()):
                problem = f"Content-Length: must be a non-negative integer, got {raw[:40]!r}"
            if problem:
                self.close_connection = True
                self._error(400, problem)
                return None
            length = int(raw or 0)
            if length > MAX_BODY:
                self.close_connection = True
                self._error(
                    413, f"request body of {length} bytes is over the {MAX_BODY} byte limit"
                )
                return None
            self.connection.settimeout(30.0)  # a client that sends less than it declared
            try:
                body = self.rfile.read(length)
            except TimeoutError:
                body = b""
            finally:
                self.connection.settimeout(None)
            if len(body) < length:
                self.close_connection = True
                self._error(400, f"Content-Length: declared {length} bytes, got {len(body)}")
                return None
            return body

        def _post(self) -> None:
            body = self._read_body()
            if body is None:
                return
            if self.path == "/_control":
                self._control(body)
                return
            if self.path.split("?")[0] != "/v1/messages":
                self._error(404, f"no route {self.path}")
                return
            status, problem, req = _check_request(srv, self.headers, body)
            images = 0
            if req is not None:
                images = sum(
                    isinstance(b, dict) and b.get("type") == "image"
                    for m in req["messages"]
                    for b in (m["content"] if isinstance(m["content"], list) else [])
                )
            b = srv.next_behaviour() if status == 200 else {}
            answers = status == 200 and not {"hang", "close", "status"} & set(b)
            delay = srv.next_latency() if answers else 0.0
            with srv.lock:
                srv.requests.append({"t": time.time(), "status": _answered(status, b),
                                     "problem": problem, "images": images,
                                     "model": (req or {}).get("model"), "behaviour": b,
                                     "latency_s": round(delay, 3)})  # fmt: skip
            if status != 200:
                self._error(status, problem)
                return
            self._behave(b, req, delay)

        def _control(self, body: bytes) -> None:
            """Re-script the fake; a bad script is refused whole and the old one kept."""
            shape = '{"default": B, "queue": [B, ...]}'
            try:
                ctl = _parse_json(body)
            except ValueError as exc:
                self._error(400, f"control body is not valid JSON ({exc}); expected {shape}")
                return
            if not isinstance(ctl, dict) or set(ctl) - {"default", "queue"}:
                self._error(400, f"control body: expected {shape}, got {body[:200]!r}")
                return
            queue = ctl.get("queue", [])
            if not isinstance(queue, list):
                self._error(400, f"control body: queue must be a list of behaviours, got {queue!r}")
                return
            try:
                srv.script(ctl.get("default"), *queue)
            except ValueError as exc:
                self._error(400, f"control body: {exc} (the previous script is kept)")
                return
            self._send(200, {"ok": True})

        def _behave(self, b: dict[str, Any], req: dict[str, Any], delay: float = 0.0) -> None:
            if "hang" in b:
                srv.stopping.wait(float(b["hang"]))
                self.close_connection = True
                return
            if b.get("close"):
                self.close_connection = True
                self.connection.close()
                return
            if "status" in b:
                st = int(b["status"])
                hdrs = {"retry-after": str(b["retry_after"])} if "retry_after" in b else None
                msg = {429: "Number of requests has exceeded your rate limit",
                       529: "Overloaded", 500: "Internal server error"}.get(st, "error")  # fmt: skip
                self._error(st, msg, hdrs)
                return
            if delay > 0 and srv.stopping.wait(delay):  # the model takes its time; stop ends it
                self.close_connection = True
                return
            text = b.get("text")
            if text is None and not b.get("refusal"):
                text = json.dumps(b.get("answer", DEFAULT_ANSWER))
            content = [] if text is None else [{"type": "text", "text": text}]
            self._send(
                200,
                {
                    "id": f"msg_{uuid.uuid4().hex[:24]}",
                    "type": "message",
                    "role": "assistant",
                    "model": req["model"],
                    "content": content,
                    "stop_reason": "refusal" if b.get("refusal") else "end_turn",
                    "stop_sequence": None,
                    "usage": {"input_tokens": 1500, "output_tokens": 40},
                },
            )

    return Handler


def _port(text: str) -> int:
    """argparse type: a TCP port, 0 meaning any free one."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is outside 0..65535 (0: any free port)")
    return port


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m mecharm_dev.messages_api",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--port", type=_port, default=8089, help="TCP port (0: any free one)")
    p.add_argument("--key", help="accept only this x-api-key (default: any non-empty key)")
    p.add_argument("--answer", help="the model's JSON answer (default: a confident yes)")
    p.add_argument("--behaviour", help="a behaviour as JSON, e.g. '{\"status\": 529}'")
    p.add_argument(
        "--latency",
        choices=sorted(TIMING_PROFILES),
        default="ideal",
        help="answer after the VLM call time of this sim profile (docs/simulation-timing.md); "
        "ideal: at once",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the drawn latencies")
    a = p.parse_args(argv)
    try:
        srv = MessagesApiServer(
            a.port, a.key, latency=TIMING_PROFILES[a.latency].judge, seed=a.seed
        )
    except OSError as exc:
        p.error(f"cannot listen on 127.0.0.1:{a.port}: {exc.strerror or exc}; pick another --port")
    try:
        if a.behaviour:
            srv.script(json.loads(a.behaviour))
        elif a.answer:
            srv.script({"answer": json.loads(a.answer)})
    except ValueError as exc:
        srv.httpd.server_close()
        p.error(f"--answer/--behaviour: {exc}")
    print(
        f"messages API stand-in on {srv.url} (POST /v1/messages; latency {a.latency}, "
        f"median {srv.latency.median_s():.2f} s)",
        flush=True,
    )
    try:
        srv.httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.stopping.set()
        srv.httpd.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
