"""The daemon's TCP server: one control client at a time, every arm call serialized.

Life cycle (uvicorn-style): ``start`` (open the backend, listen) → serve →
``stop`` (stop accepting → let the command in flight finish, up to a grace
period → cancel the rest → close the backend).

The client slot (docs/daemon.md, "Client slot"): a connection waits in a bounded
pool until it proves itself (with a token: a valid ``hello``; without: its first
complete request) and only then holds the arm; a connection that arrives while
the slot is held gets one ``busy`` line and is closed, the holder is not
disturbed. Waiting connections that do not prove themselves within
``auth_timeout_s`` and a holder silent for ``idle_timeout_s`` are dropped by one
keeper task, so the request path pays no timer.

Each line is answered by exactly one response line, in order. Blocking
backend calls run in a worker thread (one at a time), so the event loop keeps
answering (busy replies, shutdown) while the arm works, and no two calls ever
overlap on the serial line. Who owns which task, and every deadline:
[docs/concurrency.md](../docs/concurrency.md).

One concern: the daemon's connections (accept, the client slot, its keeper, the life cycle);
what a request does is in commands.py.
"""

from __future__ import annotations

import asyncio
import math
import socket
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
from pydantic import BaseModel

from mecharm.common.envelope import Envelope
from mecharm.common.hosted import start_hosted
from mecharm.common.logging import get_logger
from mecharm.daemon.acceptor import LISTEN_BACKLOG, Acceptor, peer_closed
from mecharm.daemon.backends.base import ArmBackend
from mecharm.daemon.commands import ArmCommands
from mecharm.daemon.protocol import (
    COMMANDS,
    MAX_LINE_BYTES,
    ErrorCode,
    ProtocolError,
    encode,
    error_response,
)
from mecharm.daemon.stats import DaemonStats

__all__ = ["ArmServer", "run_server"]

log = get_logger("mecharm.daemon.server")

_TOO_LONG = object()
#: how long a closing socket may take to flush (busy replies, the last answer)
_CLOSE_S = 1.0
#: an address's failed hellos are forgotten after this long without a new one
_FAILURE_MEMORY_S = 60.0
#: addresses whose failed hellos are remembered (the oldest is forgotten first)
_FAILURE_ADDRESSES = 1024


@dataclass(eq=False)  # identity: a connection is a key of the waiting pool
class Conn:
    peer: str
    host: str
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    #: when it must have proved itself (hello with the token, or its first request)
    deadline: float
    opened: float = field(default_factory=time.monotonic)
    authed: bool = False
    #: True once it holds the client slot
    holder: bool = False
    auth_failures: int = 0
    #: this connection's own tasks; stop() and the keeper cancel it
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    #: True while waiting for the next line (nothing in flight), since ``read_since``
    reading: bool = False
    read_since: float = 0.0
    #: when a reply started waiting for the client to read it (None: nothing pending)
    writing_since: float | None = None
    #: why the keeper or the pool dropped it (set before its scope is cancelled)
    drop_reason: str | None = None
    #: set by a reply after which the connection is closed (busy, too many failures)
    close_after: str | None = None
    #: set by the handler when it next goes idle or ends; created by stop() only
    idle_waiter: anyio.Event | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    #: the connection's socket, to see whether its peer has closed it without reading
    sock: socket.socket | None = None

    def went_idle(self) -> None:
        if self.idle_waiter is not None:
            self.idle_waiter.set()


async def _close(writer: asyncio.StreamWriter) -> None:
    """Close and wait (bounded, shielded: also on the way out of a cancelled connection)."""
    writer.close()
    with anyio.move_on_after(_CLOSE_S, shield=True), suppress(Exception):
        await writer.wait_closed()


class ArmServer(ArmCommands):
    """Serve ``backend`` on ``host:port`` (port 0 = pick a free one; see ``.port``).

    ``token``: shared secret; when set, the first request must be ``hello`` with it
    and every other command is refused until then. The slot rules and what each
    timeout means: docs/daemon.md, "Client slot". ``envelope``: every ``send_angles``
    outside it is refused with ``outside_envelope`` before it reaches the backend
    (default: the SDK limits with j1 <= 88; docs/daemon.md, "Safety envelope").

    Two ways to run it: ``await task_group.start(server.run)`` (structured; the
    caller's task group owns the server), or ``await start()`` … ``await stop()``
    for callers without a task group (``run_server``, tests).
    """

    def __init__(
        self,
        backend: ArmBackend,
        host: str = "127.0.0.1",
        port: int = 5555,
        token: str | None = None,
        *,
        auth_timeout_s: float = 2.0,
        idle_timeout_s: float = 10.0,
        shutdown_grace_s: float = 5.0,
        max_auth_failures: int = 5,
        max_connections: int = 8,
        auth_backoff_s: float = 0.25,
        auth_backoff_max_s: float = 4.0,
        envelope: Envelope | None = None,
    ) -> None:
        if token is not None and not token:
            raise ValueError("token must be a non-empty string or None")
        if max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {max_connections}")
        if auth_timeout_s <= 0 or idle_timeout_s < 0 or auth_backoff_s < 0:
            raise ValueError("auth_timeout_s must be > 0, idle_timeout_s and auth_backoff_s >= 0")
        self.backend = backend
        self.host = host
        self.requested_port = port
        self.token = token
        self.auth_timeout_s = auth_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.shutdown_grace_s = shutdown_grace_s
        self.max_auth_failures = max_auth_failures
        self.max_connections = max_connections
        self.auth_backoff_s = auth_backoff_s
        self.auth_backoff_max_s = max(auth_backoff_s, auth_backoff_max_s)
        self.envelope = envelope if envelope is not None else Envelope()
        #: the last target a send was accepted with under the per-move bound (None: none since
        #: start, stop or limp); a queued send runs from it (see _send_within_step)
        self._last_target: list[float] | None = None
        self.stats = DaemonStats()
        self._server: asyncio.base_events.Server | None = None
        self._acceptor: Acceptor | None = None
        self._hops: set[asyncio.Task[None]] = set()
        self._tg: anyio.abc.TaskGroup | None = None
        # one arm call at a time: the lock orders them, the limiter caps the threads at one
        self._arm_lock = anyio.Lock()
        self._arm_limiter = anyio.CapacityLimiter(1)
        self._active: Conn | None = None  # the slot's holder
        self._waiting: dict[Conn, None] = {}  # not yet proved, oldest first (max_connections)
        self._rejecting = 0  # busy / shutting_down replies being flushed
        self._keeper_wake = anyio.Event()
        self._link_lost = anyio.Event()
        # address -> (failed hellos, time of the last): the failure reply's delay grows with it
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()
        self._closing = False
        self._stop_reason = "requested"
        self._stop_requested = anyio.Event()
        self._stopped = anyio.Event()
        self._host: asyncio.Task[None] | None = None
        self._commands: dict[str, Callable[[Conn, Any], Any]] = {
            name: getattr(self, f"_cmd_{name}") for name in COMMANDS
        }

    # ------------------------------------------------------------ life cycle
    @property
    def port(self) -> int:
        if self._server is None or not self._server.sockets:
            return self.requested_port
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def closing(self) -> bool:
        """True once stop() has begun."""
        return self._closing

    @property
    def client(self) -> str | None:
        """Peer address of the control client, if one is connected."""
        return self._active.peer if self._active else None

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Open the backend, listen, report started, serve until ``stop()``, then shut down.

        Raises BackendError / OSError (port in use) before ``started``; the backend
        is closed again when listening fails. Every connection task belongs to this
        call's task group, so nothing outlives it.
        """
        await anyio.to_thread.run_sync(self.backend.open, limiter=self._arm_limiter)
        try:
            # asyncio's server on purpose: it resolves and binds as it always did, and each
            # connection's StreamReader frames lines cheaply (its limit is the line limit)
            # it never serves: the Acceptor accepts on its sockets (a connect flood must not
            # keep the operator out, mecharm/daemon/acceptor.py)
            self._server = await asyncio.start_server(
                self._hand_off,
                self.host,
                self.requested_port,
                limit=MAX_LINE_BYTES,
                start_serving=False,
                backlog=LISTEN_BACKLOG,
            )
        except OSError:
            await self._close_backend()
            raise
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._keep_slot)
                tg.start_soon(self._recover_link)
                # from here each live connection becomes a task of tg (_adopt)
                self._acceptor = Acceptor(self._server.sockets, self._adopt, self.stats.count)
                self._acceptor.start(asyncio.get_running_loop())
                log.info(
                    "daemon_listening",
                    host=self.host,
                    port=self.port,
                    backend=self.backend.name,
                    auth=self.token is not None,
                )
                task_status.started()
                await self._stop_requested.wait()
                await self._shut_down()
                tg.cancel_scope.cancel()  # the keeper and the link recovery
            await self._close_backend()
            log.info(
                "daemon_stopped", reason=self._stop_reason, **self.stats.snapshot()["counters"]
            )
        finally:
            self._tg = None
            self._closing = True
            self._stop_accepting()
            self._stopped.set()

    async def start(self) -> None:
        """Open the backend, then listen, serving from a background task until ``stop()``.

        Raises BackendError / OSError (port in use). For callers without a task group:
        ``run()`` is hosted in a background task (``mecharm.common.hosted``).
        """
        self._host = await start_hosted(self.run, "arm-server")

    async def stop(self, reason: str = "requested") -> None:
        """Stop accepting, let the command in flight finish, close the client and the backend."""
        if not self._closing:
            self._closing = True
            self._stop_reason = reason
            log.info("daemon_stopping", reason=reason, client=self.client)
            self._stop_accepting()  # at once
            self._stop_requested.set()
        if self._host is None and self._tg is None and not self._stopped.is_set():
            self._stopped.set()  # never started
        await self._stopped.wait()
        host, self._host = self._host, None
        if host is not None:
            await host  # re-raises a failure of run()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def _shut_down(self) -> None:
        """In run()'s task: grace for the command in flight, then EOF, then cancel."""
        for waiting in list(self._waiting):  # never an arm call in flight: close them at once
            self._drop(waiting, ErrorCode.SHUTTING_DOWN, "daemon is shutting down", None)
        conn = self._active
        if conn is not None and not conn.done.is_set() and not conn.reading:
            conn.idle_waiter = anyio.Event()
            with anyio.move_on_after(self.shutdown_grace_s) as grace:
                await conn.idle_waiter.wait()
            if grace.cancelled_caught:
                log.warning(
                    "daemon_shutdown_grace_expired",
                    grace_s=self.shutdown_grace_s,
                    reason="command in flight did not finish; cancelling its connection",
                )
        if conn is not None:
            # no byte may reach a reader that has seen EOF: asyncio asserts against it in the
            # transport's read callback ("feed_data after feed_eof") and the loop reports it;
            # a client polling while the daemon stopped made it happen (docs/daemon.md)
            transport = conn.writer.transport
            if isinstance(transport, asyncio.ReadTransport):
                with suppress(Exception):  # the transport may be closing already
                    transport.pause_reading()
            conn.reader.feed_eof()  # the handler's read ends; it closes the connection itself
            with anyio.move_on_after(_CLOSE_S):
                await conn.done.wait()
            # still in a backend call: cancel it. A thread call cannot be interrupted, so the
            # cancellation lands when the call returns: the arm is never used by two calls
            conn.scope.cancel()
        if self._server is not None:
            with anyio.move_on_after(_CLOSE_S):
                await self._server.wait_closed()

    async def _recover_link(self) -> None:
        """Reopen a lost serial link on the backend's schedule (docs/daemon.md, "Serial link
        recovery"). Each attempt is one backend call: under the arm lock, in the worker
        thread, so it never overlaps a command."""
        while True:
            wait = self.backend.reopen_in()
            if wait is None:  # the link is up (or attempts are used up): wait for news
                await self._link_lost.wait()
                self._link_lost = anyio.Event()
                continue
            await anyio.sleep(wait)
            async with self._arm_lock:
                again = self.backend.reopen_in()  # a command may have reopened it meanwhile
                if again is not None and again <= 0:
                    try:
                        await anyio.to_thread.run_sync(
                            self.backend.reopen, limiter=self._arm_limiter
                        )
                    except Exception:  # a bug in a backend's reopen must not stop the daemon
                        log.exception("serial_reopen_crashed", backend=self.backend.name)
                        await anyio.sleep(1.0)

    async def _close_backend(self) -> None:
        async with self._arm_lock:
            try:
                await anyio.to_thread.run_sync(self.backend.close, limiter=self._arm_limiter)
            except Exception as exc:  # closing must not hide the shutdown
                log.warning("backend_close_failed", error=repr(exc))

    def _stop_accepting(self) -> None:
        if self._acceptor is not None:
            self._acceptor.stop()
            self._acceptor = None
        if self._server is not None:
            self._server.close()

    # ------------------------------------------------------------ connections
    def _adopt(self, sock: socket.socket) -> None:
        """The Acceptor's hand-over of a live connection (from an event-loop callback): it
        becomes a task of run()'s task group by way of an asyncio task, because anyio finds
        its event loop from a task also when ``sniffio`` is installed (a plain callback has
        no current task)."""
        if self._tg is None or self._closing:  # run() has ended; the listener is closing
            sock.close()
            return
        hop = asyncio.get_running_loop().create_task(self._hand_over(sock))
        self._hops.add(hop)  # a task nobody references may be collected mid-way
        hop.add_done_callback(self._hops.discard)

    async def _hand_over(self, sock: socket.socket) -> None:
        if self._tg is None or self._closing:
            sock.close()
            return
        self._tg.start_soon(self._adopted, sock)

    async def _adopted(self, sock: socket.socket) -> None:
        try:
            reader, writer = await asyncio.open_connection(sock=sock, limit=MAX_LINE_BYTES)
        except OSError:
            sock.close()
            return
        await self._on_connect(reader, writer, sock)

    async def _hand_off(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """asyncio's accept callback, never called (the server never serves: the Acceptor
        accepts); kept as the server's required callback."""
        writer.close()

    async def _on_connect(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        sock: socket.socket | None = None,
    ) -> None:
        name = tuple(writer.get_extra_info("peername") or ("?", "?"))
        host = str(name[0])
        peer = f"{host}:{name[1]}"
        self.stats.count("connections")
        if self._closing or self._active is not None:
            await self._reject(writer, peer)
            return
        if len(self._waiting) >= self.max_connections:
            self._shed_closed_waiting()
        if len(self._waiting) >= self.max_connections:
            # the oldest has waited longest; a real client proves itself in one round trip,
            # so a flood must open max_connections connections within that to push it out
            self._drop(
                next(iter(self._waiting)),
                ErrorCode.BUSY,
                f"{self.max_connections} connections are waiting to authenticate "
                "(max_connections); the oldest is dropped to admit a new one",
                "evictions",
            )
        now = time.monotonic()
        conn = Conn(
            peer, host, reader, writer, deadline=now + self.auth_timeout_s, opened=now, sock=sock
        )
        self._waiting[conn] = None
        self._keeper_wake.set()
        log.info("client_connected", peer=peer, waiting=len(self._waiting))
        reason = "client closed the connection"
        try:
            with conn.scope:
                reason = await self._serve(conn)
            if conn.scope.cancelled_caught:
                reason = conn.drop_reason or "daemon shutdown (cancelled after the grace period)"
        except (ConnectionError, OSError) as exc:
            reason = f"connection lost: {exc!r}"
        except Exception as exc:  # a bug here must not take the server's task group down
            reason = f"internal error {type(exc).__name__}: {exc}"
            log.exception("connection_failed", peer=peer)
        finally:
            self._waiting.pop(conn, None)
            if self._active is conn:
                self._active = None
            log.info("client_disconnected", peer=peer, reason=reason, held_slot=conn.holder)
            await _close(writer)
            conn.done.set()
            conn.went_idle()

    def _shed_closed_waiting(self) -> None:
        """End the waiting connections whose peers have closed them but whose end of file
        this loop has not read yet, so they cannot push a live one out of a full pool.

        A connect flood makes these: the Acceptor peeks a connection a moment before its
        peer closes it, and a burst of accepts queues their tasks ahead of their end of
        file (docs/daemon.md, "Connect flood"). No reply and no warning: nobody reads it.
        """
        for conn in list(self._waiting):
            if conn.sock is not None and conn.drop_reason is None and peer_closed(conn.sock):
                conn.drop_reason = "closed by its peer while waiting to prove itself"
                self._waiting.pop(conn, None)
                self.stats.count("closed_while_waiting")
                conn.scope.cancel()

    async def _reject(self, writer: asyncio.StreamWriter, peer: str) -> None:
        """One ``busy`` / ``shutting_down`` line, then close (the holder is not disturbed)."""
        if self._closing:
            code, msg, counter = (
                ErrorCode.SHUTTING_DOWN,
                "daemon is shutting down",
                "rejected_shutting_down",
            )
        else:
            holder = self._active.peer if self._active else "?"
            code, msg, counter = (
                ErrorCode.BUSY,
                f"another control client ({holder}) is connected; the daemon serves one client "
                f"at a time (a silent one loses the slot after idle_timeout_s "
                f"{self.idle_timeout_s:g} s)",
                "busy_rejections",
            )
        self.stats.count(counter)
        if self._rejecting >= 4 * self.max_connections:
            # a flood of connections while the slot is held: no reply, so nothing piles up
            writer.transport.abort()
            log.warning(
                "client_rejected",
                peer=peer,
                code=code.value,
                reason=f"{msg}; closed without a reply ({self._rejecting} rejections in flight)",
            )
            return
        log.warning("client_rejected", peer=peer, code=code.value, reason=msg)
        self._rejecting += 1
        try:
            await self._send_and_close(writer, error_response(None, code, msg))
        finally:
            self._rejecting -= 1

    def _drop(self, conn: Conn, code: ErrorCode, why: str, counter: str | None) -> None:
        """Tell ``conn`` why (one error line) and end its task; it no longer holds or waits."""
        if conn.drop_reason is not None:
            return
        conn.drop_reason = why
        self._waiting.pop(conn, None)
        if self._active is conn:
            self._active = None  # free at once: the next client need not wait for the close
        with suppress(Exception):  # the transport may be closing already
            conn.writer.write(encode(error_response(None, code, f"closing the connection: {why}")))
        if counter is not None:
            self.stats.count(counter)
        log.warning(
            "client_dropped", peer=conn.peer, code=code.value, reason=why, held_slot=conn.holder
        )
        conn.scope.cancel()

    def _claim(self, conn: Conn, rid: int | None) -> None:
        """``conn`` has proved itself: it takes the slot, or gets ``busy`` and is closed."""
        holder = self._active
        if holder is not None and holder is not conn:
            conn.close_after = f"busy: {holder.peer} holds the client slot"
            self.stats.count("busy_rejections")
            raise ProtocolError(
                ErrorCode.BUSY,
                f"another control client ({holder.peer}) is connected; the daemon serves one "
                "client at a time",
                rid,
            )
        self._waiting.pop(conn, None)
        conn.holder = True
        self._active = conn
        self.stats.count("slot_taken")
        log.info(
            "slot_taken",
            peer=conn.peer,
            after_s=round(time.monotonic() - conn.opened, 3),
            authenticated=self.token is not None,
        )
        for other in list(self._waiting):
            self._drop(
                other,
                ErrorCode.BUSY,
                f"{conn.peer} has taken the client slot; the daemon serves one client at a time",
                "busy_rejections",
            )
        self._keeper_wake.set()

    async def _keep_slot(self) -> None:
        """Drop waiting connections past their auth deadline and a holder idle too long.

        One task instead of a timer per read: the request path only notes when it began
        waiting (``read_since``); this task sleeps until the earliest deadline, and a
        holder that was active meanwhile just moves its deadline on.
        """
        idle = self.idle_timeout_s
        while True:
            self._keeper_wake = wake = anyio.Event()
            now = time.monotonic()
            due = math.inf
            for conn in list(self._waiting):
                if now >= conn.deadline:
                    if self.token is not None:
                        code, why = (
                            ErrorCode.UNAUTHORIZED,
                            f"no valid hello with token within {self.auth_timeout_s:g} s "
                            "(auth_timeout_s)",
                        )
                    else:
                        code, why = (
                            ErrorCode.IDLE_TIMEOUT,
                            f"no complete request within {self.auth_timeout_s:g} s of connecting "
                            "(auth_timeout_s)",
                        )
                    self._drop(conn, code, why, "auth_timeouts")
                else:
                    due = min(due, conn.deadline)
            holder = self._active
            if holder is not None and idle > 0:
                if holder.reading:
                    at, why = holder.read_since + idle, f"idle for {idle:g} s (idle_timeout_s)"
                elif holder.writing_since is not None:
                    at = holder.writing_since + idle
                    why = f"did not read its replies for {idle:g} s (idle_timeout_s)"
                else:  # a command in flight: its time is not idle time; look again later
                    at, why = now + idle, ""
                if now >= at and why:
                    self._drop(holder, ErrorCode.IDLE_TIMEOUT, why, "idle_timeouts")
                else:
                    due = min(due, at)
            with anyio.move_on_after(due - now if due < math.inf else math.inf):
                await wake.wait()

    def _failure_delay(self, host: str) -> tuple[int, float]:
        """Count a failed hello from ``host``; (failures remembered, seconds to delay the reply).

        The delay doubles with each failure from the address (``auth_backoff_s`` ..
        ``auth_backoff_max_s``) and only ever holds back the failing connection's own
        reply: a correct hello, from any address, is answered at once.
        """
        now = time.monotonic()
        count, last = self._failures.pop(host, (0, now))
        if now - last > _FAILURE_MEMORY_S:
            count = 0
        count += 1
        self._failures[host] = (count, now)
        while len(self._failures) > _FAILURE_ADDRESSES:
            self._failures.popitem(last=False)
        return count, min(self.auth_backoff_max_s, self.auth_backoff_s * 2 ** min(count - 1, 30))

    async def _send_and_close(self, writer: asyncio.StreamWriter, msg: BaseModel) -> None:
        try:
            writer.write(encode(msg))
            with anyio.move_on_after(_CLOSE_S):
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            await _close(writer)

    async def _read_line(self, reader: asyncio.StreamReader) -> bytes | object | None:
        """One line (with or without its newline), ``_TOO_LONG`` (discarded), or None at EOF."""
        try:
            return await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            return exc.partial or None
        except asyncio.LimitOverrunError as exc:
            consumed = exc.consumed
        # discard the over-long line up to and including its newline
        while True:
            await reader.readexactly(max(1, consumed))
            try:
                await reader.readuntil(b"\n")
                return _TOO_LONG
            except asyncio.IncompleteReadError:
                return None
            except asyncio.LimitOverrunError as exc:
                consumed = exc.consumed

    async def _next_line(self, conn: Conn) -> bytes | object | None:
        """The next line; the keeper ends the wait if a deadline passes (no timer here)."""
        conn.reading = True
        conn.read_since = time.monotonic()
        conn.went_idle()
        try:
            return await self._read_line(conn.reader)
        finally:
            conn.reading = False

    async def _serve(self, conn: Conn) -> str:
        writer = conn.writer
        while not self._closing:
            line = await self._next_line(conn)
            if line is None:
                return "daemon shutdown" if self._closing else "client closed the connection"
            if line is _TOO_LONG:
                self.stats.record("<invalid>", 0.0, ErrorCode.LINE_TOO_LONG.value)
                out = encode(
                    error_response(
                        None,
                        ErrorCode.LINE_TOO_LONG,
                        f"line longer than {MAX_LINE_BYTES} bytes discarded",
                    )
                )
                log.warning("request_rejected", peer=conn.peer, code="line_too_long")
            else:
                assert isinstance(line, bytes)
                out = await self._handle_line(conn, line)
            writer.write(out)
            if writer.transport.get_write_buffer_size():  # the client is not reading (yet)
                conn.writing_since = time.monotonic()
            await writer.drain()
            conn.writing_since = None
            if conn.close_after is not None:
                return conn.close_after
            if conn.auth_failures >= self.max_auth_failures:
                return f"{conn.auth_failures} failed authentication attempts"
        return "daemon shutdown"


@asynccontextmanager
async def run_server(
    backend: ArmBackend,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    **kwargs: Any,
) -> AsyncIterator[ArmServer]:
    """Start an ArmServer (port 0 = a free port, read ``server.port``) and stop it on exit."""
    server = ArmServer(backend, host, port, token, **kwargs)
    await server.start()
    try:
        yield server
    finally:
        await server.stop("context exit")
