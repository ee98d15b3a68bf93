"""The daemon's accept path under a connect flood (docs/daemon.md, "Connect flood").

A local process that opens and closes connections as fast as it can (non-blocking
``connect`` then ``close``, 6,600-26,000 a second from one to four processes) filled the
kernel's accept queue faster than asyncio's accept path emptied it (a transport, a
stream reader, a task and three log lines per connection). The kernel then drops every
new SYN, the operator's too, which retries after 1 s, 3 s, 7 s: 2-3 of 20 operator
connects were served within 3 s.

So the listening sockets get a large backlog and one cheap loop on the event loop:
on each readiness it accepts up to ``BURST`` connections, and for each peeks one byte
without waiting. A connection its peer already closed (end of file or reset) is closed
at once: no transport, no task, no log line, only a count (``connections_shed``, a
summary line at most every ``SUMMARY_S``). A live one is handed to the server as before
(its slot rules, its authentication deadline, its log lines). Nothing is decided by
source address: on loopback the operator and a flooder are both 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any

from mecharm.common.logging import get_logger

__all__ = ["BURST", "LISTEN_BACKLOG", "Acceptor", "peer_closed"]

log = get_logger(__name__)

#: the listen backlog asked for (the kernel caps it at net.core.somaxconn, 4096 on Linux >= 5.4)
LISTEN_BACKLOG = 4096
#: connections accepted per readiness before the event loop runs anything else (~10 ms)
BURST = 512
#: at most one ``connections_shed`` line per this many seconds
SUMMARY_S = 10.0
#: after an accept error (out of file descriptors) the listener rests this long
RETRY_S = 1.0


def peer_closed(sock: socket.socket) -> bool:
    """True when ``sock``'s peer has closed it (end of file or reset), without reading:
    one byte is peeked without waiting, and a connection with nothing to read is live."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False  # nothing sent yet: a client that will say hello
    except OSError:
        return True  # reset by the peer


class Acceptor:
    """Accept on ``listeners`` (the server's bound sockets) and hand each live connection
    to ``adopt`` (a non-blocking socket it then owns); see the module docstring."""

    def __init__(
        self,
        listeners: Iterable[Any],
        adopt: Callable[[socket.socket], None],
        count: Callable[[str, int], None],
    ) -> None:
        # a private duplicate of each listening socket: the server keeps its own for
        # getsockname() and close(), and never accepts on them
        self._socks = [socket.socket(fileno=os.dup(s.fileno())) for s in listeners]
        for s in self._socks:
            s.setblocking(False)
            s.listen(LISTEN_BACKLOG)  # the server was made not serving: nothing listens yet
        self._adopt = adopt
        self._count = count
        self._loop: asyncio.AbstractEventLoop | None = None
        self.shed = 0
        self._shed_told = 0
        self._told_at = time.monotonic()
        self._error_told = False

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        for s in self._socks:
            loop.add_reader(s.fileno(), self._burst, s)

    def stop(self) -> None:
        """Stop accepting at once; connections already handed over are the server's."""
        loop, self._loop = self._loop, None
        for s in self._socks:
            if loop is not None:
                with contextlib.suppress(Exception):
                    loop.remove_reader(s.fileno())
            with contextlib.suppress(OSError):
                s.close()
        self._socks = []
        self._summary(force=True)

    def _burst(self, lsock: socket.socket) -> None:
        for _ in range(BURST):
            try:
                conn, _addr = lsock.accept()
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:  # EMFILE, ENFILE, ENOBUFS: pause, as asyncio's accept does
                if not self._error_told:
                    self._error_told = True
                    log.warning("accept_failed", error=str(exc), retry_s=RETRY_S)
                self._pause(lsock)
                break
            if peer_closed(conn):
                self.shed += 1
                with contextlib.suppress(OSError):
                    conn.close()
                continue
            conn.setblocking(False)
            self._adopt(conn)
        self._summary()

    def _pause(self, lsock: socket.socket) -> None:
        """Stop watching ``lsock`` for RETRY_S: a failing accept stays readable (no busy loop)."""
        loop = self._loop
        if loop is None:
            return
        loop.remove_reader(lsock.fileno())

        def resume() -> None:
            if self._loop is not None and lsock in self._socks:
                self._loop.add_reader(lsock.fileno(), self._burst, lsock)

        loop.call_later(RETRY_S, resume)

    def _summary(self, force: bool = False) -> None:
        now = time.monotonic()
        new = self.shed - self._shed_told
        if new and (force or now - self._told_at >= SUMMARY_S):
            self._count("connections_shed", new)
            log.warning(
                "connections_shed",
                count=new,
                interval_s=round(now - self._told_at, 1),
                reason="closed by their peer before the daemon read them (a connect flood?); "
                "closed unread, not logged one by one",
            )
            self._shed_told, self._told_at = self.shed, now
