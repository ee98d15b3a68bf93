"""HTTP MJPEG reader (``multipart/x-mixed-replace``), written on a plain socket.

Why not ``cv2.VideoCapture(url)``: OpenCV's FFmpeg backend buffers several
frames (hundreds of ms of latency) and keeps returning buffered frames after
the server is gone, hiding a disconnect. Here a reader thread parses the
stream as it arrives and keeps only the newest JPEG; ``read()`` waits for a
JPEG newer than the last one returned and decodes it, so latency is one frame
and a closed or broken stream turns into ``ok=False`` at once.

Parsing: an HTTP/1.0 request (no chunked encoding); the boundary comes from the
response's Content-Type. Each part has headers, then either ``Content-Length``
bytes or (without it) everything up to the next boundary line. Sizes are
bounded; anything malformed ends the stream as a read failure, naming why.
"""

from __future__ import annotations

import base64
import contextlib
import socket
import threading
import time
from urllib.parse import unquote, urlsplit

import cv2
import numpy as np

from mecharm.cameras.base import CameraNotOpenError, CameraOpenError, CameraSource, Frame

__all__ = ["MjpegHttpCamera", "MjpegStreamError"]

_LINE_MAX = 8192
_HEADERS_MAX = 64
_PREAMBLE_LINES_MAX = 64


class MjpegStreamError(ConnectionError):
    """The stream ended or broke; the message says how."""


class MjpegHttpCamera(CameraSource):
    """Newest-frame reader of an HTTP MJPEG stream; every part reaches the taps as JPEG bytes,
    on the reader thread, before anyone decodes it (docs/top-camera.md)."""

    taps_every_frame = True

    def __init__(
        self,
        url: str,
        connect_timeout: float = 3.0,
        read_timeout: float = 2.0,
        stall_timeout: float = 5.0,
        max_part_bytes: int = 16 * 1024 * 1024,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"MJPEG source needs an http://host[:port]/path URL, got {url!r}")
        self.spec = url
        self.host = parts.hostname
        self.port = parts.port or 80
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        # phone IP-camera apps often want basic auth: http://user:pass@host:port/video
        self._auth = ""
        if parts.username is not None:
            token = base64.b64encode(
                f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            )
            self._auth = f"Authorization: Basic {token.decode()}\r\n"
            self.spec = url.replace(f"{parts.password}@", "***@") if parts.password else url
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.stall_timeout = stall_timeout
        self.max_part_bytes = max_part_bytes
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._cond = threading.Condition()
        self._latest: tuple[bytes, float, int] | None = None
        self._seq = 0
        self._read_seq = 0
        self._failure: str | None = None
        self._closing = False
        self.parts_received = 0
        self._pending_boundary = False

    @property
    def is_open(self) -> bool:
        return self._sock is not None

    @property
    def failure(self) -> str | None:
        """Why the stream ended (None while it is healthy)."""
        return self._failure

    # --- open / close -----------------------------------------------------------------
    def open(self) -> None:
        if self._sock is not None:
            return
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout)
        except OSError as exc:
            raise CameraOpenError(f"{self.spec}: cannot connect: {exc.strerror or exc}") from exc
        fh = None
        try:
            sock.settimeout(self.connect_timeout)
            req = (
                f"GET {self.path} HTTP/1.0\r\nHost: {self.host}:{self.port}\r\n"
                f"User-Agent: mecharm-recorder\r\nAccept: multipart/x-mixed-replace\r\n{self._auth}\r\n"
            )
            sock.sendall(req.encode("latin-1"))
            fh = sock.makefile("rb")
            boundary = self._read_response_head(fh)
            sock.settimeout(self.stall_timeout)
        except (OSError, MjpegStreamError) as exc:
            # the file first: a socket closed while its file is open stays open until the
            # file goes, and the exception's frames keep both until a garbage collection
            # finalizes them in any order ("unclosed socket" under load)
            if fh is not None:
                fh.close()
            sock.close()
            raise CameraOpenError(f"{self.spec}: {exc}") from exc
        self._sock = sock
        self._closing = False
        self._failure = None
        self._latest = None
        self._seq = self._read_seq = 0
        self._thread = threading.Thread(
            target=self._reader, args=(fh, boundary), name=f"mjpeg-{self.port}", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        sock, self._sock = self._sock, None
        self._closing = True
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        with self._cond:
            self._cond.notify_all()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)
        self._latest = None

    # --- parsing ----------------------------------------------------------------------
    @staticmethod
    def _line(fh) -> bytes:  # type: ignore[no-untyped-def]
        line = fh.readline(_LINE_MAX + 1)
        if not line:
            raise MjpegStreamError("stream closed by the server")
        if len(line) > _LINE_MAX:
            raise MjpegStreamError("header line too long")
        return line

    def _headers(self, fh) -> dict[str, str]:  # type: ignore[no-untyped-def]
        headers: dict[str, str] = {}
        for _ in range(_HEADERS_MAX):
            line = self._line(fh).strip()
            if not line:
                return headers
            name, sep, value = line.decode("latin-1").partition(":")
            if not sep:
                raise MjpegStreamError(f"malformed header line {line[:60]!r}")
            headers[name.strip().lower()] = value.strip()
        raise MjpegStreamError("too many header lines")

    def _read_response_head(self, fh) -> tuple[bytes, ...]:  # type: ignore[no-untyped-def]
        status = self._line(fh).decode("latin-1").strip()
        fields = status.split(" ", 2)
        if len(fields) < 2 or not fields[0].startswith("HTTP/"):
            raise MjpegStreamError(f"not an HTTP response: {status[:60]!r}")
        if fields[1] != "200":
            raise MjpegStreamError(f"HTTP status {status[:80]!r}")
        headers = self._headers(fh)
        if "chunked" in headers.get("transfer-encoding", "").lower():
            raise MjpegStreamError("chunked transfer encoding is not supported")
        ctype = headers.get("content-type", "")
        if not ctype.lower().startswith("multipart/"):
            raise MjpegStreamError(f"content type {ctype[:60]!r} is not multipart MJPEG")
        boundary = ""
        for param in ctype.split(";")[1:]:
            key, _, val = param.strip().partition("=")
            if key.lower() == "boundary":
                boundary = val.strip().strip('"')
        if not boundary:
            raise MjpegStreamError("multipart content type without a boundary")
        # RFC 2046: the delimiter is "--" + boundary; some servers declare "--x" and send "--x"
        raw = boundary.encode("latin-1")
        return (b"--" + raw, raw) if raw.startswith(b"--") else (b"--" + raw,)

    def _next_part(self, fh, boundary: tuple[bytes, ...]) -> bytes:  # type: ignore[no-untyped-def]
        """Read one part; the boundary line may already be consumed by a length-less part."""
        if self._pending_boundary:
            self._pending_boundary = False
        else:
            for _ in range(_PREAMBLE_LINES_MAX):
                line = self._line(fh).rstrip(b"\r\n")
                if line.startswith(boundary):
                    if line.endswith(b"--") and line not in boundary:
                        raise MjpegStreamError("stream ended (closing boundary)")
                    break
                if line:
                    raise MjpegStreamError(f"expected boundary, got {line[:40]!r}")
            else:
                raise MjpegStreamError("no boundary found")
        headers = self._headers(fh)
        length = headers.get("content-length")
        if length is not None:
            if not length.isdigit() or int(length) > self.max_part_bytes:
                raise MjpegStreamError(f"bad part Content-Length {length[:20]!r}")
            n = int(length)
            data = fh.read(n)
            if len(data) < n:
                raise MjpegStreamError("stream closed inside a part")
            return bytes(data)
        # no length: the body runs up to the next boundary line, which we consume here
        chunks: list[bytes] = []
        size = 0
        while True:
            line = fh.readline(65536)
            if not line:
                raise MjpegStreamError("stream closed inside a part")
            if line.startswith(boundary):
                if line.rstrip(b"\r\n").endswith(b"--") and line.rstrip(b"\r\n") not in boundary:
                    raise MjpegStreamError("stream ended (closing boundary)")
                self._pending_boundary = True
                body = b"".join(chunks)
                return body[:-2] if body.endswith(b"\r\n") else body
            chunks.append(line)
            size += len(line)
            if size > self.max_part_bytes:
                raise MjpegStreamError("part larger than the limit")

    def _reader(self, fh, boundary: tuple[bytes, ...]) -> None:  # type: ignore[no-untyped-def]
        self._pending_boundary = False
        try:
            while not self._closing:
                data = self._next_part(fh, boundary)
                wall, mono = time.time(), time.monotonic_ns()
                with self._cond:
                    self._latest = (data, wall, mono)
                    self._seq += 1
                    self.parts_received += 1
                    self._cond.notify_all()
                if self._taps:  # outside the lock: a reader of the newest frame never waits on it
                    self._tap(data, wall, mono)
        except TimeoutError:
            self._fail(f"no data for {self.stall_timeout:g} s")
        except (OSError, MjpegStreamError, ValueError) as exc:
            self._fail(str(exc) if self._sock is not None else "closed")
        finally:
            with contextlib.suppress(OSError):
                fh.close()

    def _fail(self, why: str) -> None:
        with self._cond:
            if self._failure is None:
                self._failure = why
            self._cond.notify_all()

    def newest(self) -> tuple[bytes, float, int] | None:
        with self._cond:
            return self._latest

    # --- read -------------------------------------------------------------------------
    def read(self) -> Frame:
        if self._sock is None:
            raise CameraNotOpenError(f"{self.spec}: read() on a closed camera")
        deadline = time.monotonic() + self.read_timeout
        with self._cond:
            while self._seq == self._read_seq and self._failure is None and self._sock is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return Frame(False, None, time.time(), time.monotonic_ns())
                self._cond.wait(left)
            if self._seq == self._read_seq or self._latest is None:
                return Frame(False, None, time.time(), time.monotonic_ns())
            data, wall, mono = self._latest
            self._read_seq = self._seq
        img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        if img is None:
            return Frame(False, None, wall, mono)
        return Frame(True, img, wall, mono, jpeg=data)
