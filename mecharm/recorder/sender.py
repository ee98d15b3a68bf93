"""Client side of the recorder protocol: fire-and-forget events and frame requests.

``notify`` must never change what the runtime does (the observer principle, docs/recorder.md):
it serializes, hands one datagram to the kernel on a non-blocking socket and
swallows every failure — recorder absent, socket buffer full, bad event. It
costs a few microseconds. With ``background=True`` (the runtime's) ``notify`` only queues
the event and a thread of the sender's own sends it: a ``sendto`` releases the GIL, and the
caller must then win it back from whichever thread took it meanwhile, which on a busy
machine costs the asyncio loop milliseconds per event (docs/observer.md, "What costs a
trial time"). ``request_frame`` maps every failure to a reply
reason and never raises; ``request_frame_async`` does the same without blocking
an asyncio loop. Each request uses its own ephemeral reply socket, so a late
reply to an earlier request can never be taken for the current one.

Every datagram is signed (``mecharm.recorder.envelope``; docs/recorder.md, "Authenticated
events") with the key from the key file, under this sender's session id and the
next sequence number, naming the trial the sender has open. A reply is taken only
if its MAC holds and it answers this request's sequence number; anything else on
the reply socket is counted in ``replies_ignored`` and the wait goes on.

``ping``/``ping_async`` ask the recorder where it writes (docs/recorder.md, "Ping: proving
the data root"). The ping goes out on a socket *connected* to the recorder's address, so
the kernel hands back only datagrams from that address, and a port nobody listens on is
known at once (ICMP port unreachable → ``refused``) instead of after the timeout.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import queue
import secrets
import socket
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anyio

from mecharm.common.fsutil import UnsafeNameError, validate_name
from mecharm.common.keyfile import default_recorder_key_file, load_or_create_key
from mecharm.recorder.envelope import (
    EVENT_LABEL,
    REPLY_LABEL,
    EnvelopeError,
    new_session_id,
    seal,
    unseal,
)
from mecharm.recorder.events import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    REASON_MALFORMED_REPLY,
    REASON_TIMEOUT,
    EventError,
    FrameReply,
    FrameRequest,
    Ping,
    Pong,
    exception_reason,
    parse_frame_reply,
    parse_pong,
)

__all__ = ["PING_REFUSED", "PingResult", "RecorderSender"]

#: ping outcomes besides ok / timeout / malformed_reply / exception:{Type}: nothing listens
PING_REFUSED: Final = "refused"
#: while nothing listens, ask again this often until the deadline (a recorder starting up)
_PING_RETRY_S: Final = 0.1


@dataclass(frozen=True)
class PingResult:
    """What a ping found: the pong (``reason`` ok), or why there is none."""

    reason: str
    pong: Pong | None = None
    rtt_ms: float | None = None
    #: pings sent (more than one when nothing listened at first)
    tries: int = 1

    @property
    def ok(self) -> bool:
        return self.pong is not None


_REPLY_MAX = 65_535
#: events queued for the sending thread at most; more are dropped and counted, so a stuck
#: thread can never grow the runtime's memory
BACKGROUND_QUEUE_MAX: Final = 10_000
#: on close, how long the sending thread may take to send what is still queued
_CLOSE_FLUSH_S: Final = 1.0
_STOP: Final = object()
FrameResult = tuple[str | None, float | None, str]


class RecorderSender:
    """Sends events to the recorder at ``host:port`` (UDP, one signed JSON event per datagram).

    The key is ``key`` if given, else read from ``key_file`` (default: the per-user
    ``recorder.key``, created 0600 if missing); a key file that is too open raises
    ``mecharm.common.keyfile.KeyFileError`` here, at construction, never later.
    """

    def __init__(
        self,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        *,
        key: bytes | None = None,
        key_file: Path | str | None = None,
        background: bool = False,
    ) -> None:
        self.host = host
        self.port = int(port)
        self._addr = (host, self.port)
        self._sock: socket.socket | None = None
        if key is None:
            key = load_or_create_key(Path(key_file) if key_file else default_recorder_key_file())
        self._key = key
        #: this sender's session; ``next(self._seq)`` is atomic, so threads may share a sender
        self.session = new_session_id()
        self._seq = itertools.count(1)
        #: the trial this sender opened (trial_start .. trial_end); every datagram names it
        self.trial: str | None = None
        self.sent = 0
        self.dropped = 0
        self.replies_ignored = 0
        #: events go out from a thread of their own (``notify`` only queues them)
        self.background = background
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closing = False

    # --- fire and forget -------------------------------------------------------------
    def _socket(self) -> socket.socket:
        sock = self._sock
        if sock is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.setblocking(False)
            self._sock = sock
            # a sender dropped without close() must not leak a ResourceWarning into callers
            self._finalizer = weakref.finalize(self, sock.close)
        return sock

    def _scope(self, event: Any) -> str | None:
        """The trial an event belongs to; trial_start/trial_end open and close it."""
        mapping = isinstance(event, Mapping)
        etype = event.get("type") if mapping else event.type
        if etype not in ("trial_start", "trial_end"):
            return self.trial  # the common case: no attribute lookup that may fail (slow)
        try:
            stem: str | None = validate_name(
                event.get("run_stem") if mapping else event.run_stem, "run_stem"
            )
        except UnsafeNameError:
            stem = None
        self.trial = stem if etype == "trial_start" else None
        return stem

    def seal_event(self, body: bytes, trial: str | None) -> tuple[int, bytes]:
        """(seq, datagram): ``body`` signed under this session's next sequence number."""
        seq = next(self._seq)
        return seq, seal(self._key, EVENT_LABEL, self.session, seq, trial, body)

    def notify(self, event: Any) -> None:
        """Send one event (a model from mecharm.recorder.events or a mapping); never raises or blocks.

        In background mode the event is queued with its trial, taken now (so a frame request
        made next names the trial this event opened), and the sending thread does the rest."""
        try:
            trial = self._scope(event)
            if not self.background:
                self._send(event, trial)
            elif self._closing or self._queue.qsize() >= BACKGROUND_QUEUE_MAX:
                self.dropped += 1
            else:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._pump, name="recorder-events", daemon=True
                    )
                    self._thread.start()
                self._queue.put((event, trial))
        except Exception:  # observer principle: a recorder problem is never the runtime's
            self.dropped += 1

    def _send(self, event: Any, trial: str | None) -> None:
        try:
            if isinstance(event, Mapping):
                body = json.dumps(dict(event), separators=(",", ":")).encode()
            else:
                body = event.model_dump_json().encode()
            self._socket().sendto(self.seal_event(body, trial)[1], self._addr)
            self.sent += 1
        except Exception:
            self.dropped += 1

    def _pump(self) -> None:
        """The sending thread: the queue's events in order, until close()."""
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            self._send(*item)

    def emit(self, event_type: type[Any], **fields: Any) -> None:
        """Build and send an event, e.g. ``emit(Measured, angles=a)``; never raises.

        Building a model validates it (``Measured(angles=[])`` raises); ``emit``
        counts such an event as dropped instead, so a bad reading from the arm can
        never turn into an exception in the runtime.
        """
        try:
            event = event_type(**fields)
        except Exception:
            self.dropped += 1
            return
        self.notify(event)

    def close(self) -> None:
        """Send what is still queued (at most ``_CLOSE_FLUSH_S``), then close the socket."""
        self._closing = True
        thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(_STOP)
            thread.join(_CLOSE_FLUSH_S)
        sock, self._sock = self._sock, None
        if sock is not None:
            self._finalizer.detach()
            sock.close()

    def __enter__(self) -> RecorderSender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- frame requests ----------------------------------------------------------------
    def _reply_socket(self) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        return sock

    def _request(self, tag: str, port: int) -> tuple[int, bytes]:
        req = FrameRequest(tag=tag, reply_port=port)
        return self.seal_event(req.model_dump_json().encode(), self.trial)

    def _accept(self, data: bytes, addr: Any, tag: str, seq: int) -> FrameReply | None:
        """Parse a reply; None means 'not for us, keep waiting'. Raises EventError when a
        reply signed for this request is not a valid reply."""
        if addr[0] != "127.0.0.1":
            return None
        try:
            sealed = unseal(self._key, REPLY_LABEL, data)
        except EnvelopeError:
            self.replies_ignored += 1  # unsigned or forged: not the recorder's
            return None
        if sealed.sid != self.session or sealed.seq != seq:
            self.replies_ignored += 1  # a replayed reply to another request
            return None
        reply = parse_frame_reply(sealed.body)
        if reply.tag is not None and reply.tag != tag:
            return None
        return reply

    def request_frame_reply(self, tag: str, timeout: float = 2.0) -> FrameReply:
        """Ask for the newest side frame; the full reply (incl. camera_frozen). Never raises."""
        try:
            with self._reply_socket() as sock:
                seq, data = self._request(tag, sock.getsockname()[1])
                deadline = time.monotonic() + timeout
                sock.sendto(data, self._addr)
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return FrameReply(reason=REASON_TIMEOUT, tag=tag)
                    sock.settimeout(left)
                    try:
                        data, addr = sock.recvfrom(_REPLY_MAX)
                    except TimeoutError:
                        return FrameReply(reason=REASON_TIMEOUT, tag=tag)
                    except ConnectionRefusedError:  # ICMP port unreachable: nobody listens
                        continue
                    reply = self._accept(data, addr, tag, seq)
                    if reply is not None:
                        return reply
        except EventError:
            return FrameReply(reason=REASON_MALFORMED_REPLY, tag=tag)
        except Exception as exc:  # invalid tag, socket failure, ...
            return FrameReply(reason=exception_reason(exc), tag=tag)

    def request_frame(self, tag: str, timeout: float = 2.0) -> FrameResult:
        """Blocking: ``(path, capture_ts, reason)``; every failure is a reason, never raised."""
        r = self.request_frame_reply(tag, timeout)
        return r.path, r.capture_ts, r.reason

    async def request_frame_reply_async(self, tag: str, timeout: float = 2.0) -> FrameReply:
        """Like request_frame_reply, awaiting the reply without blocking the event loop."""
        loop = asyncio.get_running_loop()
        try:
            with self._reply_socket() as sock:
                sock.setblocking(False)
                seq, request = self._request(tag, sock.getsockname()[1])
                # one deadline for the whole exchange; a cancel scope, unlike 3.11's wait_for,
                # never swallows an outer cancellation that races with the reply
                with anyio.move_on_after(timeout):
                    await loop.sock_sendto(sock, request, self._addr)
                    while True:
                        try:
                            data, addr = await loop.sock_recvfrom(sock, _REPLY_MAX)
                        except (
                            ConnectionRefusedError
                        ):  # ICMP port unreachable: nobody listens (yet)
                            continue
                        reply = self._accept(data, addr, tag, seq)
                        if reply is not None:
                            return reply
                return FrameReply(reason=REASON_TIMEOUT, tag=tag)
        except EventError:
            return FrameReply(reason=REASON_MALFORMED_REPLY, tag=tag)
        except Exception as exc:
            return FrameReply(reason=exception_reason(exc), tag=tag)

    async def request_frame_async(self, tag: str, timeout: float = 2.0) -> FrameResult:
        """Async twin of request_frame: ``(path, capture_ts, reason)``."""
        r = await self.request_frame_reply_async(tag, timeout)
        return r.path, r.capture_ts, r.reason

    # --- ping ----------------------------------------------------------------------------------
    def _ping_datagram(self) -> tuple[int, str, bytes]:
        nonce = secrets.token_hex(8)
        seq, data = self.seal_event(Ping(nonce=nonce).model_dump_json().encode(), self.trial)
        return seq, nonce, data

    def _pong(self, data: bytes, seq: int, nonce: str) -> Pong | None:
        """The pong if ``data`` answers this ping; None (counted) otherwise. Raises EventError
        for a pong signed for this ping whose body is not a valid pong."""
        try:
            sealed = unseal(self._key, REPLY_LABEL, data)
        except EnvelopeError:
            self.replies_ignored += 1
            return None
        if sealed.sid != self.session or sealed.seq != seq:
            self.replies_ignored += 1
            return None
        pong = parse_pong(sealed.body)
        return pong if pong.nonce == nonce else None

    def _ping_socket(self) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.setblocking(False)
            sock.connect(self._addr)
        except BaseException:
            sock.close()
            raise
        return sock

    async def ping_async(self, timeout: float = 1.0) -> PingResult:
        """Ask the recorder where it writes; never raises (every failure is a ``reason``).

        While nothing listens (``refused``) it asks again every 0.1 s until ``timeout``, so a
        recorder started at the same moment is still found."""
        loop = asyncio.get_running_loop()
        tries, refused = 0, False
        try:
            with self._ping_socket() as sock, anyio.move_on_after(timeout):
                while True:
                    seq, nonce, data = self._ping_datagram()
                    tries, refused = tries + 1, False
                    sent = time.monotonic()
                    try:
                        await loop.sock_sendall(sock, data)
                        while True:
                            pong = self._pong(await loop.sock_recv(sock, _REPLY_MAX), seq, nonce)
                            if pong is not None:
                                rtt = (time.monotonic() - sent) * 1e3
                                return PingResult("ok", pong, round(rtt, 2), tries)
                    except ConnectionRefusedError:  # ICMP port unreachable: nobody listens
                        refused = True
                        await anyio.sleep(_PING_RETRY_S)
            return PingResult(PING_REFUSED if refused else REASON_TIMEOUT, tries=tries)
        except EventError:
            return PingResult(REASON_MALFORMED_REPLY, tries=tries)
        except Exception as exc:
            return PingResult(exception_reason(exc), tries=tries)

    def ping(self, timeout: float = 1.0) -> PingResult:
        """Blocking twin of ``ping_async`` (tools and scripts without an event loop)."""
        deadline = time.monotonic() + timeout
        tries, refused = 0, False
        try:
            with self._ping_socket() as sock:
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return PingResult(PING_REFUSED if refused else REASON_TIMEOUT, tries=tries)
                    seq, nonce, data = self._ping_datagram()
                    tries, refused = tries + 1, False
                    sent = time.monotonic()
                    try:
                        sock.send(data)
                        while True:
                            left = deadline - time.monotonic()
                            if left <= 0:
                                break
                            sock.settimeout(left)
                            try:
                                pong = self._pong(sock.recv(_REPLY_MAX), seq, nonce)
                            except TimeoutError:
                                break
                            if pong is not None:
                                rtt = (time.monotonic() - sent) * 1e3
                                return PingResult("ok", pong, round(rtt, 2), tries)
                    except ConnectionRefusedError:
                        refused = True
                        time.sleep(max(0.0, min(_PING_RETRY_S, deadline - time.monotonic())))
        except EventError:
            return PingResult(REASON_MALFORMED_REPLY, tries=tries)
        except Exception as exc:
            return PingResult(exception_reason(exc), tries=tries)
