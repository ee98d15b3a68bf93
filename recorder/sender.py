"""Client side of the recorder protocol: fire-and-forget events and frame requests.

``notify`` must never change what the runtime does (the observer principle, docs/recorder.md):
it serializes, hands one datagram to the kernel on a non-blocking socket and
swallows every failure — recorder absent, socket buffer full, bad event. It
costs a few microseconds. ``request_frame`` maps every failure to a reply
reason and never raises; ``request_frame_async`` does the same without blocking
an asyncio loop. Each request uses its own ephemeral reply socket, so a late
reply to an earlier request can never be taken for the current one.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
import weakref
from collections.abc import Mapping
from typing import Any

import anyio

from recorder.events import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    REASON_MALFORMED_REPLY,
    REASON_TIMEOUT,
    EventError,
    FrameReply,
    FrameRequest,
    exception_reason,
    parse_frame_reply,
)

__all__ = ["RecorderSender"]

_REPLY_MAX = 65_535
FrameResult = tuple[str | None, float | None, str]


class RecorderSender:
    """Sends events to the recorder at ``host:port`` (UDP, one JSON object per datagram)."""

    def __init__(self, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
        self.host = host
        self.port = int(port)
        self._addr = (host, self.port)
        self._sock: socket.socket | None = None
        self.sent = 0
        self.dropped = 0

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

    def notify(self, event: Any) -> None:
        """Send one event (a model from recorder.events or a mapping); never raises or blocks."""
        try:
            if isinstance(event, Mapping):
                data = json.dumps(dict(event), separators=(",", ":")).encode()
            else:
                data = event.model_dump_json().encode()
            self._socket().sendto(data, self._addr)
            self.sent += 1
        except Exception:  # observer principle: a recorder problem is never the runtime's
            self.dropped += 1

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

    @staticmethod
    def _accept(data: bytes, addr: Any, tag: str) -> FrameReply | None:
        """Parse a reply; None means 'not for us, keep waiting'. Raises EventError."""
        if addr[0] != "127.0.0.1":
            return None
        reply = parse_frame_reply(data)
        if reply.tag is not None and reply.tag != tag:
            return None
        return reply

    def request_frame_reply(self, tag: str, timeout: float = 2.0) -> FrameReply:
        """Ask for the newest side frame; the full reply (incl. camera_frozen). Never raises."""
        try:
            with self._reply_socket() as sock:
                port = sock.getsockname()[1]
                req = FrameRequest(tag=tag, reply_port=port)
                deadline = time.monotonic() + timeout
                sock.sendto(req.model_dump_json().encode(), self._addr)
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
                    reply = self._accept(data, addr, tag)
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
                port = sock.getsockname()[1]
                req = FrameRequest(tag=tag, reply_port=port)
                # one deadline for the whole exchange; a cancel scope, unlike 3.11's wait_for,
                # never swallows an outer cancellation that races with the reply
                with anyio.move_on_after(timeout):
                    await loop.sock_sendto(sock, req.model_dump_json().encode(), self._addr)
                    while True:
                        try:
                            data, addr = await loop.sock_recvfrom(sock, _REPLY_MAX)
                        except (
                            ConnectionRefusedError
                        ):  # ICMP port unreachable: nobody listens (yet)
                            continue
                        reply = self._accept(data, addr, tag)
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
